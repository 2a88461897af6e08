"""Fault planning, the fault log, the injector's bounds, and the supervisor (with tiny
real processes, no servers)."""

from __future__ import annotations

import json
import random
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from relay.chaos import faults
from relay.chaos.faults import FaultContext, FaultKind, Outcome, plan_faults
from relay.chaos.injector import FaultInjector, FaultLog
from relay.chaos.processes import Command, Slot, Supervisor, is_stopped
from relay.errors import FaultSkipped
from relay.runtime.clock import SystemClock
from tests.fakes.publishing import FakeClock


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


def _wait(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_supervisor_restarts_exited_processes_and_records_exit_codes(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path, SystemClock(), interval=0.02)
    supervisor.add(
        Slot("quick", lambda n: _python(f"raise SystemExit({n})", tmp_path), lambda: 0.0)
    )
    supervisor.start()
    try:
        _wait(lambda: supervisor.slots["quick"].starts >= 3)
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
    _wait(lambda: is_stopped(first.pid))
    replaced = supervisor.replace("relay")
    assert replaced is not None and replaced[0] is first
    assert supervisor.running("relay") is replaced[1]
    first.kill_tree()
    _wait(lambda: first.poll() is not None)
    supervisor.tick()
    assert supervisor.zombie_exits == {"SIGKILL": 1}
    supervisor.shutdown(timeout=5)
    assert supervisor.slots["relay"].exits == {"SIGTERM": 1}
