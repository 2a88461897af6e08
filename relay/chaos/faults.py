"""The faults: their kinds, a seeded plan, and what each kind does.

:mod:`relay.chaos.injector` injects them one at a time and logs each one.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from relay.chaos.processes import (
    ManagedProcess,
    Supervisor,
    command_line,
    descendants,
    is_stopped,
    process_tree,
)
from relay.errors import FaultSkipped
from relay.runtime.clock import Clock, wait_until


class FaultKind(StrEnum):
    KILL9_RELAY = "kill9_relay"
    KILL9_MIRROR = "kill9_mirror"
    KILL9_SPARK = "kill9_spark"
    KILL9_BROKER = "kill9_broker"
    RESTART_POSTGRES = "restart_postgres"
    PAUSE_RELAY = "pause_relay"
    PAUSE_MIRROR = "pause_mirror"


# Relative frequency once every kind has been injected once; the slow faults (broker
# restart, Spark start-up, a mirror's session timeout) are rarer.
WEIGHTS: dict[FaultKind, float] = {
    FaultKind.KILL9_RELAY: 3.0,
    FaultKind.KILL9_MIRROR: 2.0,
    FaultKind.KILL9_SPARK: 1.0,
    FaultKind.KILL9_BROKER: 1.0,
    FaultKind.RESTART_POSTGRES: 2.0,
    FaultKind.PAUSE_RELAY: 2.0,
    FaultKind.PAUSE_MIRROR: 1.0,
}


def plan_faults(count: int, kinds: Sequence[FaultKind], rng: random.Random) -> list[FaultKind]:
    """``count`` fault kinds: every kind once (shuffled) first, then weighted draws."""
    if not kinds:
        return []
    first = list(kinds)
    rng.shuffle(first)
    rest = rng.choices(list(kinds), [WEIGHTS[k] for k in kinds], k=max(0, count - len(first)))
    return (first + rest)[:count]


@dataclass(frozen=True, slots=True)
class Outcome:
    target: str
    detail: str


@dataclass
class FaultContext:
    """What the faults act on. ``restart_broker``/``restart_database`` crash and restart
    the chaos servers."""

    supervisor: Supervisor
    clock: Clock
    rng: random.Random
    relay_partitions: int
    mirror_slots: Sequence[str]
    spark_jobs: Mapping[str, str]  # slot -> what its log shows once tasks run
    restart_broker: Callable[[], None]
    restart_database: Callable[[], None]
    mirror_pause_s: float = 15.0
    target_timeout_s: float = 30.0

    def wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        return wait_until(condition, timeout, clock=self.clock)

    def running(self, slot: str, timeout: float | None = None) -> ManagedProcess:
        found: list[ManagedProcess] = []

        def up() -> bool:
            process = self.supervisor.running(slot)
            if process is not None:
                found.append(process)
            return process is not None

        if not self.wait(up, self.target_timeout_s if timeout is None else timeout):
            raise FaultSkipped(f"no {slot} process came up")
        return found[-1]


def kill9_relay(ctx: FaultContext) -> Outcome:
    process = ctx.running("relay")
    process.kill_tree()
    return Outcome(f"relay pid {process.pid}", "SIGKILL")


def kill9_mirror(ctx: FaultContext) -> Outcome:
    process = ctx.running(ctx.rng.choice(list(ctx.mirror_slots)))
    process.kill_tree()
    return Outcome(f"{process.name} pid {process.pid}", "SIGKILL")


def kill9_spark(ctx: FaultContext) -> Outcome:
    """Kill a Spark job (the relay's or the mirror's) while its tasks work: the whole
    job (driver, JVM, Python workers) or one Python worker (Spark re-runs the task)."""
    slots = sorted(ctx.spark_jobs)
    if not slots:
        raise FaultSkipped("no Spark job in this run")
    ctx.rng.shuffle(slots)
    for attempt in range(4):  # a job may find nothing to do and end at once
        slot = slots[attempt % len(slots)]
        job = _job_at_work(ctx, slot)
        if job is not None:
            break
    else:
        raise FaultSkipped("no Spark job was caught with its tasks at work (4 tries)")
    tree = process_tree()
    workers = [
        pid
        for pid in descendants(job.pid, tree)
        if "pyspark.daemon" in command_line(pid) and not tree.get(pid)
    ]
    if workers and ctx.rng.random() < 0.5:
        worker = ctx.rng.choice(workers)
        _kill(worker)
        return Outcome(f"{slot} job pid {job.pid}", f"SIGKILL of Python worker pid {worker}")
    job.kill_tree()
    return Outcome(f"{slot} job pid {job.pid}", "SIGKILL of the driver, its JVM and workers")


def _job_at_work(ctx: FaultContext, slot: str) -> ManagedProcess | None:
    """Start the job of ``slot`` now (unless it runs) and wait until its tasks work."""
    marker = ctx.spark_jobs[slot]
    ctx.supervisor.start_now(slot)
    job = ctx.running(slot, timeout=60.0)
    shown = _Appears(_LogReader(job.log_path), marker)
    if not ctx.wait(lambda: not job.alive or shown(), 90.0):
        raise FaultSkipped(f"{slot} job pid {job.pid} never started a task")
    return job if job.alive else None


def kill9_broker(ctx: FaultContext) -> Outcome:
    ctx.restart_broker()
    return Outcome("Kafka broker", "SIGKILL, restarted and answering")


def restart_postgres(ctx: FaultContext) -> Outcome:
    ctx.restart_database()
    return Outcome("PostgreSQL", "pg_ctl stop -m immediate, restarted")


def _stop(ctx: FaultContext, process: ManagedProcess, inside: str) -> str:
    """SIGSTOP ``process``; half of the time (when it has a trap) let it stop itself at
    its failpoint instead, i.e. ``inside`` a transaction. Returns where it stopped."""
    where = "anywhere"
    if ctx.rng.random() < 0.5 and process.arm_trap():
        if ctx.wait(lambda: _stopped_or_gone(process), 8.0):
            where = inside
        elif process.disarm_trap():
            where = "anywhere (nothing to do before the trap was disarmed)"
        elif ctx.wait(lambda: _stopped_or_gone(process), 5.0):
            where = inside
    process.signal_group(signal.SIGSTOP)
    return where


def pause_relay(ctx: FaultContext) -> Outcome:
    """SIGSTOP the relay (half of the time inside a Kafka transaction), start a new
    instance that fences it, SIGCONT the old one once the new one has taken over."""
    old = ctx.running("relay")
    where = _stop(ctx, old, "inside a Kafka transaction")
    replaced = ctx.supervisor.replace("relay")
    if replaced is None:
        old.signal_group(signal.SIGCONT)
        raise FaultSkipped(f"relay pid {old.pid} exited before it could be replaced")
    _, new = replaced
    fenced = _FencedPartitions(_LogReader(new.log_path))
    took_over = ctx.wait(lambda: fenced() >= ctx.relay_partitions or not new.alive, 60.0)
    old.signal_group(signal.SIGCONT)
    state = "took over every partition" if took_over and new.alive else "did NOT take over"
    return Outcome(
        f"relay pid {old.pid}", f"SIGSTOP {where}; new relay pid {new.pid} {state}; SIGCONT"
    )


def pause_mirror(ctx: FaultContext) -> Outcome:
    """SIGSTOP a mirror consumer until the group gives its partitions to another one
    (the other consumer logs an assignment), at most ``mirror_pause_s``."""
    slot = ctx.rng.choice(list(ctx.mirror_slots))
    old = ctx.running(slot)
    others = [ctx.supervisor.running(name) for name in ctx.mirror_slots if name != slot]
    assigned = [_appears_from_now(p.log_path, "assigned ") for p in others if p is not None]
    where = _stop(ctx, old, "inside its database transaction")
    stopped = ctx.clock.monotonic()
    moved = ctx.wait(lambda: any(appeared() for appeared in assigned), ctx.mirror_pause_s)
    held = ctx.clock.monotonic() - stopped
    old.signal_group(signal.SIGCONT)
    state = "its partitions reassigned" if moved else "no reassignment seen"
    return Outcome(f"{slot} pid {old.pid}", f"SIGSTOP {where} for {held:.0f} s ({state}), SIGCONT")


ACTIONS: dict[FaultKind, Callable[[FaultContext], Outcome]] = {
    FaultKind.KILL9_RELAY: kill9_relay,
    FaultKind.KILL9_MIRROR: kill9_mirror,
    FaultKind.KILL9_SPARK: kill9_spark,
    FaultKind.KILL9_BROKER: kill9_broker,
    FaultKind.RESTART_POSTGRES: restart_postgres,
    FaultKind.PAUSE_RELAY: pause_relay,
    FaultKind.PAUSE_MIRROR: pause_mirror,
}


class _LogReader:
    """A process's log file, read incrementally: each read returns the bytes appended
    since the previous one (rather than the whole file every poll)."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self._path = path
        self._offset = offset

    def read(self) -> bytes:
        try:
            with self._path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return b""
        self._offset += len(data)
        return data


class _Appears:
    """Whether ``text`` occurs in what ``log`` has read so far (once true, stays true)."""

    def __init__(self, log: _LogReader, text: str) -> None:
        self._log = log
        self._needle = text.encode()
        self._carry = b""  # the last len(needle) - 1 bytes: the start of a split needle
        self._found = False

    def __call__(self) -> bool:
        if not self._found:
            data = self._carry + self._log.read()
            self._found = self._needle in data
            self._carry = data[max(0, len(data) - len(self._needle) + 1) :]
        return self._found


def _appears_from_now(path: Path, text: str) -> _Appears:
    """Whether ``text`` newly occurs in the log at ``path``: not already complete in it
    now (an occurrence still being written counts)."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    start = max(0, size - len(text.encode()) + 1)
    return _Appears(_LogReader(path, start), text)


class _FencedPartitions:
    """How many relay partitions the log of a relay shows fenced: complete lines are
    parsed once, the last (incomplete) line at every call."""

    def __init__(self, log: _LogReader) -> None:
        self._log = log
        self._fenced: set[str] = set()
        self._partial = b""

    def __call__(self) -> int:
        complete, _, self._partial = (self._partial + self._log.read()).rpartition(b"\n")
        self._fenced |= _fenced_in(complete)
        return len(self._fenced | _fenced_in(self._partial))


def _fenced_in(data: bytes) -> set[str]:
    return {
        line.split("relay partition ", 1)[1].split(":")[0]
        for line in data.decode(errors="replace").splitlines()
        if "fenced, position" in line and "relay partition " in line
    }


def _stopped_or_gone(process: ManagedProcess) -> bool:
    return not process.alive or is_stopped(process.pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
