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
from contextlib import contextmanager
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "serial: runs alone, with no other integration test beside it (it restarts a shared "
        "server)",
    )


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers a core. Most integration tests wait on the servers (a
    transaction's markers, a group's rebalance, a child process), not on the CPU."""
    return max(2, 2 * (os.cpu_count() or 1))


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (not the controller, not a plain run)."""
    return hasattr(config, "workerinput")


def runs_workers(config: pytest.Config) -> bool:
    """Whether this process is the controller of xdist workers."""
    return not is_worker(config) and bool(getattr(config.option, "numprocesses", 0))


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on file ``path`` (created if missing): one process at a time,
    across workers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path, fcntl.LOCK_EX):
        yield


@contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
        with _locked(turnstile, fcntl.LOCK_EX), _locked(room, fcntl.LOCK_EX):
            yield
        return
    with _locked(turnstile, fcntl.LOCK_EX):
        handle = room.open("a")
        fcntl.flock(handle, fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
