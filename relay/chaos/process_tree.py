"""The processes of this machine as /proc shows them: who descends from whom, which are
stopped, and SIGKILL only for a process that is still the one noted (a pid whose process
ended may have been given to another since: pid_max can be as low as 32768)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from relay.devenv.processes import (
    process_cmdline,
    process_start_time,
    process_stat,
    process_state,
)


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = process_stat(int(entry.name))
        if fields is not None and len(fields) > 1:
            parents[int(entry.name)] = int(fields[1])
    return parents


def process_tree() -> dict[int, list[int]]:
    """``pid -> its children`` of every live process, from one scan of /proc."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    return children


def descendants(pid: int, tree: Mapping[int, list[int]] | None = None) -> list[int]:
    """Every live descendant of ``pid`` (from /proc, or from ``tree``, a
    :func:`process_tree`), parents before children."""
    children = process_tree() if tree is None else tree
    found: list[int] = []
    queue = list(children.get(pid, ()))
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(children.get(current, ()))
    return found


def identified(pids: Sequence[int]) -> list[tuple[int, str]]:
    """``pids`` with their start times, for :func:`kill_identified` later."""
    found = [(pid, process_start_time(pid)) for pid in pids]
    return [(pid, started) for pid, started in found if started is not None]


def kill_identified(
    family: Sequence[tuple[int, str]], kill: Callable[[int, int], None] = os.kill
) -> None:
    """SIGKILL each process of ``family`` (:func:`identified`) that is still the one
    noted: a pid whose process ended may have been given to another process since."""
    for pid, started in family:
        if process_start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                kill(pid, signal.SIGKILL)


def command_line(pid: int) -> str:
    return process_cmdline(pid) or ""


def is_stopped(pid: int) -> bool:
    """True when ``pid`` is stopped by a signal (state T in /proc)."""
    return process_state(pid) in ("T", "t")
