"""Fault planning, the fault log, the injector's bounds, and the supervisor (with tiny
real processes, no servers)."""

from __future__ import annotations

import json
import random
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from relay.chaos import faults
from relay.chaos.faults import FaultContext, Outcome, plan_faults
from relay.chaos.injector import FaultInjector, FaultLog
from relay.chaos.names import FaultKind
from relay.chaos.process_tree import is_stopped
from relay.chaos.processes import Command, Slot, Supervisor
from relay.devenv.waiting import wait_until
from relay.errors import FaultSkipped
from relay.publishing.partition_relay import READY as RELAY_READY
from relay.replication.startup import READY as REPLICA_READY
from relay.runtime.clock import SystemClock
from tests.fakes.publishing import FakeClock

RELAY = f"{RELAY_READY}; resuming after seq "  # a relay's start-up line, then the position
COPY = f"{REPLICA_READY}; copying from offset "


def test_plan_covers_every_kind_first_then_draws_by_weight_reproducibly() -> None:
    kinds = list(FaultKind)
    plan = plan_faults(200, kinds, random.Random(7))
    assert len(plan) == 200
    assert set(plan[: len(kinds)]) == set(kinds)
    assert plan == plan_faults(200, kinds, random.Random(7))
    assert plan != plan_faults(200, kinds, random.Random(8))
    counts = {k: plan.count(k) for k in kinds}
    assert counts[FaultKind.KILL9_RELAY] > counts[FaultKind.KILL9_BROKER]


def test_plan_with_fewer_faults_than_kinds_and_without_kinds() -> None:
    assert len(plan_faults(3, list(FaultKind), random.Random(1))) == 3
    assert plan_faults(5, [], random.Random(1)) == []
    assert plan_faults(4, [FaultKind.KILL9_RELAY], random.Random(1)) == [FaultKind.KILL9_RELAY] * 4


def _context(clock: FakeClock) -> FaultContext:
    return FaultContext(
        supervisor=Supervisor(Path("/nonexistent"), clock),
        clock=clock,
        rng=random.Random(1),
        relay_partitions=4,
        mirror_slots=(),
        spark_jobs={},
        restart_broker=lambda: None,
        restart_database=lambda: None,
    )


def _log(tmp_path: Path, lines: list[str]) -> FaultLog:
    return FaultLog(
        tmp_path / "faults.jsonl", lines.append, lambda: datetime(2026, 1, 2, tzinfo=UTC)
    )


def _slow(ctx: FaultContext) -> Outcome:
    ctx.clock.wait(10.0)
    return Outcome("broker", "restarted")


def test_injector_logs_each_fault_with_a_timestamp_and_respects_the_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(faults.ACTIONS, FaultKind.KILL9_BROKER, _slow)
    lines: list[str] = []
    log = _log(tmp_path, lines)
    injector = FaultInjector(
        [FaultKind.KILL9_BROKER] * 5,
        _context(FakeClock()),
        log,
        gap_s=(1.0, 1.0),
        deadline=25.0,
        stop=threading.Event(),
    )
    injector.run()
    log.close()

    # gaps of 1 s: faults start at 1, 12 and 23 s; none starts after the 25 s limit
    assert [r.n for r in log.records] == [1, 2, 3]
    assert lines[1] == (
        "2026-01-02T00:00:00.000+00:00 fault 2/5 kill9_broker: broker; restarted (10.0 s)"
    )
    stored = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert stored[0] == {
        "n": 1,
        "of": 5,
        "kind": "kill9_broker",
        "at": "2026-01-02T00:00:00.000+00:00",
        "injected": True,
        "target": "broker",
        "detail": "restarted",
        "seconds": 10.0,
    }


def test_a_skipped_fault_is_logged_and_tried_again_later_within_a_retry_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[str] = []

    def flaky(_ctx: FaultContext) -> Outcome:
        attempts.append("relay")
        if len(attempts) <= 2:
            raise FaultSkipped("no relay came up")
        return Outcome("relay pid 1", "SIGKILL")

    def never(_ctx: FaultContext) -> Outcome:
        raise FaultSkipped("no mirror came up")

    monkeypatch.setitem(faults.ACTIONS, FaultKind.KILL9_BROKER, _slow)
    monkeypatch.setitem(faults.ACTIONS, FaultKind.KILL9_RELAY, flaky)
    lines: list[str] = []
    log = _log(tmp_path, lines)
    plan = [FaultKind.KILL9_RELAY, FaultKind.KILL9_BROKER]
    FaultInjector(
        plan, _context(FakeClock()), log, gap_s=(1.0, 1.0), deadline=1e9, stop=threading.Event()
    ).run()
    assert [(r.kind, r.n) for r in log.records] == [
        ("kill9_relay", None),
        ("kill9_broker", 1),
        ("kill9_relay", None),
        ("kill9_relay", 2),
    ]
    assert (
        lines[0] == "2026-01-02T00:00:00.000+00:00 skipped kill9_relay: -; no relay came up (0.0 s)"
    )

    monkeypatch.setitem(faults.ACTIONS, FaultKind.KILL9_MIRROR, never)
    log = _log(tmp_path, [])
    FaultInjector(
        [FaultKind.KILL9_MIRROR] * 3,
        _context(FakeClock()),
        log,
        gap_s=(1.0, 1.0),
        deadline=1e9,
        stop=threading.Event(),
    ).run()
    assert len(log.records) == 6 and not any(r.injected for r in log.records)


def _python(code: str, tmp_path: Path) -> Command:
    return Command([sys.executable, "-c", code], {}, tmp_path)


def test_supervisor_restarts_exited_processes_and_records_exit_codes(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path, SystemClock(), interval=0.02)
    supervisor.add(
        Slot("quick", lambda n: _python(f"raise SystemExit({n})", tmp_path), lambda: 0.0)
    )
    supervisor.start()
    try:
        wait_until(lambda: supervisor.slots["quick"].starts >= 3, 10, "the processes")
    finally:
        supervisor.shutdown(timeout=5)
    exits = supervisor.slots["quick"].exits
    assert exits["exit 1"] == 1 and exits["exit 2"] == 1
    assert (tmp_path / "quick.0001.log").exists()


def test_replaced_process_is_a_zombie_whose_exit_is_recorded(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path, SystemClock(), interval=0.02)
    sleeper = "import time; time.sleep(60)"
    supervisor.add(Slot("relay", lambda n: _python(sleeper, tmp_path), lambda: 0.0))
    supervisor.tick()
    first = supervisor.running("relay")
    assert first is not None
    first.signal_group(signal.SIGSTOP)
    wait_until(lambda: is_stopped(first.pid), 10, "the processes")
    replaced = supervisor.replace("relay")
    assert replaced is not None and replaced[0] is first
    assert supervisor.running("relay") is replaced[1]
    first.kill_tree()
    wait_until(lambda: first.poll() is not None, 10, "the processes")
    supervisor.tick()
    assert supervisor.zombie_exits == {"relay: SIGKILL": 1}
    supervisor.shutdown(timeout=5)
    assert supervisor.slots["relay"].exits == {"SIGTERM": 1}


class _Scripted(random.Random):
    """random() returns the given values in turn."""

    def __init__(self, *values: float) -> None:
        super().__init__(0)
        self._values = list(values)

    def random(self) -> float:
        return self._values.pop(0)


def _replicator_context(tmp_path: Path, rng: random.Random, **extra: object) -> FaultContext:
    # incarnation 1 takes three partitions from the members group; the next ones log
    # that they fenced them
    fenced = "".join(
        f"print('INFO relay.replication: chaos-accounts[{p}]: {COPY}7')\n" for p in range(3)
    )
    listed = ", ".join(f"chaos-accounts[{p}]" for p in range(3))
    taking = f"print('INFO relay.commands.shared_run: taking source partitions [{listed}]')\n"

    def command(n: int) -> Command:
        code = f"import sys\n{taking if n == 1 else fenced}sys.stdout.flush()\n" + (
            "import time\ntime.sleep(60)"
        )
        return _python(code, tmp_path)

    supervisor = Supervisor(tmp_path, SystemClock(), interval=0.02)
    supervisor.add(Slot("replicator", command, lambda: 0.0))
    supervisor.tick()
    defaults: dict[str, object] = {
        "supervisor": supervisor,
        "clock": SystemClock(),
        "rng": rng,
        "relay_partitions": 4,
        "mirror_slots": (),
        "spark_jobs": {},
        "restart_broker": lambda: None,
        "restart_database": lambda: None,
        "replicator": "replicator",
        "replica_partitions": 3,
        "replicator_pause_s": 0.1,
    }
    return FaultContext(**{**defaults, **extra})  # type: ignore[arg-type]


def test_replicator_faults_are_skipped_without_a_replicator() -> None:
    ctx = _context(FakeClock())
    for action in (faults.kill9_replicator, faults.pause_replicator, faults.kill9_target_broker):
        with pytest.raises(FaultSkipped):
            action(ctx)


def test_kill9_target_broker_restarts_the_second_cluster(tmp_path: Path) -> None:
    restarted: list[str] = []
    ctx = _replicator_context(
        tmp_path, random.Random(1), restart_target_broker=lambda: restarted.append("target")
    )
    try:
        outcome = faults.kill9_target_broker(ctx)
    finally:
        ctx.supervisor.shutdown(timeout=5)
    assert restarted == ["target"]
    assert outcome.target == "target Kafka broker"


def test_kill9_replicator_kills_the_running_replicator(tmp_path: Path) -> None:
    ctx = _replicator_context(tmp_path, random.Random(1))
    process = ctx.supervisor.running("replicator")
    assert process is not None
    try:
        outcome = faults.kill9_replicator(ctx)
        wait_until(lambda: process.poll() is not None, 10, "the processes")
    finally:
        ctx.supervisor.shutdown(timeout=5)
    assert process.poll() == -signal.SIGKILL
    assert outcome == Outcome(f"replicator pid {process.pid}", "SIGKILL")


def test_pause_replicator_replaced_waits_until_what_it_held_is_fenced(tmp_path: Path) -> None:
    ctx = _replicator_context(tmp_path, _Scripted(0.9, 0.9))  # no trap; replace it
    old = ctx.supervisor.running("replicator")
    assert old is not None
    wait_until(lambda: b"taking" in old.log_path.read_bytes(), 10, "the replicator")
    try:
        outcome = faults.pause_replicator(ctx)
        new = ctx.supervisor.running("replicator")
        assert new is not None and new is not old
        assert ctx.supervisor.zombies == [old]
        assert not is_stopped(old.pid)  # SIGCONT after the take-over
    finally:
        ctx.supervisor.shutdown(timeout=5)
    held = "chaos-accounts[0], chaos-accounts[1], chaos-accounts[2]"
    assert outcome.detail == (
        f"SIGSTOP anywhere; new replicator pid {new.pid}; its partitions ({held}) taken over; "
        "SIGCONT"
    )


def test_pause_replicator_held_resumes_the_same_process(tmp_path: Path) -> None:
    ctx = _replicator_context(tmp_path, _Scripted(0.9, 0.1))  # no trap; hold it
    old = ctx.supervisor.running("replicator")
    assert old is not None
    try:
        outcome = faults.pause_replicator(ctx)
        assert ctx.supervisor.running("replicator") is old
        assert not ctx.supervisor.zombies
        assert not is_stopped(old.pid)
    finally:
        ctx.supervisor.shutdown(timeout=5)
    assert outcome.detail == "SIGSTOP anywhere; held 0 s; SIGCONT"


def _relay_context(tmp_path: Path, scripts: dict[int, str]) -> FaultContext:
    def command(n: int) -> Command:
        return _python(f"import pathlib, sys, time\n{scripts[n]}", tmp_path)

    supervisor = Supervisor(tmp_path, SystemClock(), interval=0.02)
    supervisor.add(Slot("relay", command, lambda: 0.0))
    supervisor.tick()
    return FaultContext(
        supervisor=supervisor,
        clock=SystemClock(),
        rng=_Scripted(0.9),  # no trap
        relay_partitions=4,
        mirror_slots=(),
        spark_jobs={},
        restart_broker=lambda: None,
        restart_database=lambda: None,
    )


def _say(text: str) -> str:
    return f"print({text!r}, flush=True)\n"


def test_pause_relay_waits_until_the_relays_left_fenced_what_it_held(tmp_path: Path) -> None:
    go = tmp_path / "go"
    ctx = _relay_context(
        tmp_path,
        {
            # 1: left running by an earlier pause; takes partition 1 once 3 has started
            1: f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.02)\n"
            + _say(f"relay partition 1: {RELAY}5")
            + "time.sleep(60)",
            # 2: the relay to pause, holding partitions 0 and 1
            2: _say("taking relay partitions [0, 1, 2]")
            + _say("handing relay partitions [2] on")
            + "time.sleep(60)",
            # 3: the new instance: takes partition 0
            3: _say(f"relay partition 0: {RELAY}9")
            + f"pathlib.Path({str(go)!r}).touch()\ntime.sleep(60)",
        },
    )
    replaced = ctx.supervisor.replace("relay")  # 1 becomes a zombie, 2 the current relay
    assert replaced is not None
    paused = replaced[1]
    wait_until(lambda: b"handing" in paused.log_path.read_bytes(), 10, "the processes")
    try:
        outcome = faults.pause_relay(ctx)
        new = ctx.supervisor.running("relay")
    finally:
        ctx.supervisor.shutdown(timeout=5)
    assert new is not None
    assert outcome == Outcome(
        f"relay pid {paused.pid}",
        f"SIGSTOP anywhere; new relay pid {new.pid}; its partitions (0, 1) taken over; SIGCONT",
    )


def test_pause_relay_reports_partitions_not_taken_over(tmp_path: Path) -> None:
    ctx = _relay_context(
        tmp_path,
        {
            1: _say("taking relay partitions [0, 1]") + "time.sleep(60)",
            2: _say(f"relay partition 0: {RELAY}9") + "sys.exit(5)",
        },
    )
    paused = ctx.supervisor.running("relay")
    assert paused is not None
    wait_until(lambda: b"taking" in paused.log_path.read_bytes(), 10, "the processes")
    try:
        outcome = faults.pause_relay(ctx)
    finally:
        ctx.supervisor.shutdown(timeout=5)
    assert outcome.detail.endswith("its partitions (0, 1) NOT taken over; SIGCONT")
