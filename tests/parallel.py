"""Running the suite on several pytest-xdist workers.

Integration tests share the development servers, so most of them can run side by side.
A test marked ``serial`` (it restarts a shared server, or measures something that other
tests' load would distort) runs alone: every integration test holds a shared lock on a
file while it runs, a ``serial`` one an exclusive lock. A turnstile lock in front of it
keeps a ``serial`` test from waiting for ever behind a stream of shared ones. Without
xdist (``-p no:xdist`` or ``-n 0``) nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.workers import locked


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "serial: runs alone, with no other integration test beside it (it restarts a shared "
        "server)",
    )
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


@pytest.fixture(autouse=True)
def _one_serial_test_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None or request.node.get_closest_marker("integration") is None:
        yield
        return
    directory = Path(tempfile.gettempdir()) / f"relay-tests-{run}"
    directory.mkdir(exist_ok=True)
    turnstile, room = directory / "turnstile.lock", directory / "room.lock"
    if request.node.get_closest_marker("serial") is not None:
        with locked(turnstile, fcntl.LOCK_EX), locked(room, fcntl.LOCK_EX):
            yield
        return
    with locked(turnstile, fcntl.LOCK_EX):
        handle = room.open("a")
        fcntl.flock(handle, fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
