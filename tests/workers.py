"""Which process of an xdist run this is, and file locks shared by its workers."""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


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
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """What ``build(directory)`` returns, built by the first worker that asks in a directory
    every worker of the run shares, and reused by the others (e.g. a packed virtualenv)."""
    base = factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    directory = shared / name
    done = directory / ".built"
    with exclusive(shared / f"{name}.lock"):
        if done.exists():
            return Path(done.read_text())
        directory.mkdir(exist_ok=True)
        built = build(directory)
        done.write_text(str(built))
        return built
