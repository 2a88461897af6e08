"""Running the suite on several pytest-xdist workers.

Integration tests share the development servers, each with a database, role, topics and
transactional ids of its own, so they run side by side; a test that restarts or
reconfigures a server starts one of its own (``relay.devenv.private``). ``-n 0`` runs the
suite in one process.
"""

from __future__ import annotations

import os

import pytest


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
    transaction's markers, a group's rebalance, a child process), not on the CPU. Without
    integration tests (``-m "not integration"``) none: the unit tests take seconds, less
    than starting workers would."""
    if config.option.markexpr.replace(" ", "") == "notintegration":
        return 0
    return max(2, 2 * (os.cpu_count() or 1))
