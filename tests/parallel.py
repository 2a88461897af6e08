"""Running the suite on several pytest-xdist workers.

Integration tests share the development servers, each with a database, role, topics and
transactional ids of its own, so they run side by side; a test that restarts or
reconfigures a server starts one of its own (``relay.devenv.private``). ``-n 0`` runs the
suite in one process.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

from tests.workers import is_worker

_SECONDS_BY_FILE: defaultdict[str, float] = defaultdict(float)
SHOWN_FILES = 15


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "long(seconds): takes about that many seconds (a Spark job, a broker's timeout, the "
        "chaos run): started first, longest first, so that short tests fill the other workers",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``long`` tests first, longest first (a stable sort keeps the rest in file order)."""

    def seconds(item: pytest.Item) -> float:
        marker = item.get_closest_marker("long")
        return float(marker.args[0]) if marker is not None and marker.args else 0.0

    items.sort(key=seconds, reverse=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers a core. Most integration tests wait on the servers (a
    transaction's markers, a group's rebalance, a child process), not on the CPU. Three a
    core gained nothing measurable (on 2 cores, 2026-11-27: four workers 10:05, 10:18 and
    11:15; six 9:43, 10:16, 10:42 and 11:37). Without
    integration tests (``-m "not integration"``) none: the unit tests take seconds, less
    than starting workers would."""
    if config.option.markexpr.replace(" ", "") == "notintegration":
        return 0
    return max(2, 2 * (os.cpu_count() or 1))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Adds up each test file's setup, call and teardown time (on the controller, as the
    workers report them)."""
    _SECONDS_BY_FILE[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the suite's time goes, file by file: the files that took longest, summed
    over their tests, against the workers' time in all."""
    if is_worker(terminalreporter.config) or not _SECONDS_BY_FILE:
        return
    total = sum(_SECONDS_BY_FILE.values())
    terminalreporter.section(f"slowest {SHOWN_FILES} files (of {total:.0f} s of test time)")
    ranked = sorted(_SECONDS_BY_FILE.items(), key=lambda item: item[1], reverse=True)
    for path, seconds in ranked[:SHOWN_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f}s {100 * seconds / total:5.1f}%  {path}")
