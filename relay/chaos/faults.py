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

from relay.chaos.logwatch import (
    Appears,
    Fenced,
    LogReader,
    appears_from_now,
    reader_from_now,
    relay_holdings,
    relay_partitions_fenced,
    source_holdings,
    source_partitions_fenced,
)
from relay.chaos.names import FaultKind
from relay.chaos.process_tree import command_line, descendants, is_stopped, process_tree
from relay.chaos.processes import ManagedProcess, Supervisor
from relay.chaos.replica_ops import ReplicaOperations
from relay.errors import FaultSkipped
from relay.runtime.clock import Clock, wait_until

SPARK_TASK_WAIT_S = 150.0
"""How long a Spark job started for a fault may take to start a task: a JVM and its Python
workers start slowly on a machine busy with everything else the run does."""

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
    FaultKind.KILL9_REPLICATOR: 2.0,
    FaultKind.PAUSE_REPLICATOR: 1.0,
    FaultKind.KILL9_TARGET_BROKER: 1.0,
    FaultKind.RECREATE_SOURCE_TOPIC: 0.5,
    FaultKind.DELETE_REPLICATOR_GROUP: 0.5,
    FaultKind.LOSE_SOURCE_CLUSTER: 0.2,
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
    the chaos servers, ``restart_target_broker`` the second cluster's broker (None: the
    run does not replicate); ``replicator`` names the replicator's slot, which copies
    ``replica_partitions`` source partitions; ``replica_ops`` is what the replicator's
    operator faults act on (None: the run does not replicate)."""

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
    replicator: str | None = None
    replica_partitions: int = 0
    restart_target_broker: Callable[[], None] | None = None
    replicator_pause_s: float = 8.0
    replica_ops: ReplicaOperations | None = None  # the operator faults' (replica_faults)

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
    shown = Appears(LogReader(job.log_path), marker)
    if not ctx.wait(lambda: not job.alive or shown(), SPARK_TASK_WAIT_S):
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
    instance, SIGCONT the old one once the partitions it held have been taken over:
    fenced by the new one, or by relays an earlier pause left running (relays share the
    partitions through a members group, so a fenced one goes on as a member)."""
    old = ctx.running("relay")
    where = _stop(ctx, old, "inside a Kafka transaction")
    others = [p for p in ctx.supervisor.live("relay") if p is not old]
    watched = [Fenced(reader_from_now(p.log_path), relay_partitions_fenced) for p in others]
    held = relay_holdings(old.output().encode())
    replaced = ctx.supervisor.replace("relay")
    if replaced is None:
        old.signal_group(signal.SIGCONT)
        raise FaultSkipped(f"relay pid {old.pid} exited before it could be replaced")
    _, new = replaced
    watched.append(Fenced(LogReader(new.log_path), relay_partitions_fenced))

    def taken_over() -> bool:
        return held <= set().union(*(fenced() for fenced in watched)) or not new.alive

    took_over = ctx.wait(taken_over, 60.0)
    old.signal_group(signal.SIGCONT)
    shown = ", ".join(sorted(held)) or "none"
    state = "taken over" if took_over and new.alive else "NOT taken over"
    return Outcome(
        f"relay pid {old.pid}",
        f"SIGSTOP {where}; new relay pid {new.pid}; its partitions ({shown}) {state}; SIGCONT",
    )


def pause_mirror(ctx: FaultContext) -> Outcome:
    """SIGSTOP a mirror consumer until the group gives its partitions to another one
    (the other consumer logs an assignment), at most ``mirror_pause_s``."""
    slot = ctx.rng.choice(list(ctx.mirror_slots))
    old = ctx.running(slot)
    others = [ctx.supervisor.running(name) for name in ctx.mirror_slots if name != slot]
    assigned = [appears_from_now(p.log_path, "assigned ") for p in others if p is not None]
    where = _stop(ctx, old, "inside its database transaction")
    stopped = ctx.clock.monotonic()
    moved = ctx.wait(lambda: any(appeared() for appeared in assigned), ctx.mirror_pause_s)
    held = ctx.clock.monotonic() - stopped
    old.signal_group(signal.SIGCONT)
    state = "its partitions reassigned" if moved else "no reassignment seen"
    return Outcome(f"{slot} pid {old.pid}", f"SIGSTOP {where} for {held:.0f} s ({state}), SIGCONT")


def _replicator(ctx: FaultContext) -> str:
    if ctx.replicator is None:
        raise FaultSkipped("no replicator in this run")
    return ctx.replicator


def kill9_replicator(ctx: FaultContext) -> Outcome:
    process = ctx.running(_replicator(ctx))
    process.kill_tree()
    return Outcome(f"replicator pid {process.pid}", "SIGKILL")


def kill9_target_broker(ctx: FaultContext) -> Outcome:
    if ctx.restart_target_broker is None:
        raise FaultSkipped("no target cluster in this run")
    ctx.restart_target_broker()
    return Outcome("target Kafka broker", "SIGKILL, restarted and answering")


def pause_replicator(ctx: FaultContext) -> Outcome:
    """SIGSTOP the replicator (half of the time inside a target transaction). Then either
    a new instance starts, takes every partition over (the members group gives it the
    paused one's once its session times out) and fences it, and the old one gets SIGCONT
    (it must stop, fenced, or go on as a member without committing what it held), or the
    old one is held ``replicator_pause_s`` (longer than its transaction timeout: the
    broker aborts its open transaction) and SIGCONT: it must go on without a gap or a
    duplicate."""
    slot = _replicator(ctx)
    old = ctx.running(slot)
    where = _stop(ctx, old, "inside a target transaction")
    # Replicators share the partitions through a members group: the paused one's are
    # taken over by the new one, or by a replicator an earlier pause left running.
    others = [p for p in ctx.supervisor.live(slot) if p is not old]
    watched = [Fenced(reader_from_now(p.log_path), source_partitions_fenced) for p in others]
    held = source_holdings(old.output().encode())
    if ctx.rng.random() < 0.5:
        stopped = ctx.clock.monotonic()
        ctx.clock.wait(ctx.replicator_pause_s)  # the pause itself, not a synchronisation
        paused_s = ctx.clock.monotonic() - stopped
        old.signal_group(signal.SIGCONT)
        return Outcome(
            f"replicator pid {old.pid}", f"SIGSTOP {where}; held {paused_s:.0f} s; SIGCONT"
        )
    replaced = ctx.supervisor.replace(slot)
    if replaced is None:
        old.signal_group(signal.SIGCONT)
        raise FaultSkipped(f"replicator pid {old.pid} exited before it could be replaced")
    _, new = replaced
    watched.append(Fenced(LogReader(new.log_path), source_partitions_fenced))

    def taken_over() -> bool:
        return held <= set().union(*(fenced() for fenced in watched)) or not new.alive

    took_over = ctx.wait(taken_over, 60.0)
    old.signal_group(signal.SIGCONT)
    shown = ", ".join(sorted(held)) or "none"
    state = "taken over" if took_over and new.alive else "NOT taken over"
    return Outcome(
        f"replicator pid {old.pid}",
        f"SIGSTOP {where}; new replicator pid {new.pid}; its partitions ({shown}) {state}; SIGCONT",
    )


# The replicator's operator faults are in relay.chaos.replica_faults (its own ACTIONS).
ACTIONS: dict[FaultKind, Callable[[FaultContext], Outcome]] = {
    FaultKind.KILL9_RELAY: kill9_relay,
    FaultKind.KILL9_MIRROR: kill9_mirror,
    FaultKind.KILL9_SPARK: kill9_spark,
    FaultKind.KILL9_BROKER: kill9_broker,
    FaultKind.RESTART_POSTGRES: restart_postgres,
    FaultKind.PAUSE_RELAY: pause_relay,
    FaultKind.PAUSE_MIRROR: pause_mirror,
    FaultKind.KILL9_REPLICATOR: kill9_replicator,
    FaultKind.PAUSE_REPLICATOR: pause_replicator,
    FaultKind.KILL9_TARGET_BROKER: kill9_target_broker,
}


def _stopped_or_gone(process: ManagedProcess) -> bool:
    return not process.alive or is_stopped(process.pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
