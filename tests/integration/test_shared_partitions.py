"""`relay run` processes share the relay partitions (issue 10, point 3; I3).

Three processes join the members group and divide six relay partitions. One is killed
(SIGKILL), then one is paused (SIGSTOP) past the session timeout and resumed: every
time, the partitions it held are taken over and keep flowing, the resumed process hands
on (or is fenced out of) what the group gave away without stopping its other work, and
a read_committed reader finds every row exactly once, in order.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from relay.commands.relay_job import plan_relay_job
from relay.errors import ConfigurationError
from relay.settings.relay import load_settings
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    migrate,
    read_committed,
    run_relay,
    start_relay,
    stop_members,
    wait_until,
)
from tests.integration.writes import write_events

_PARTITIONS = 6
_SESSION_MS = 6000  # the broker's group.min.session.timeout.ms
_CHANGE = re.compile(
    r"(taking|handing) relay partitions \[([\d, ]*)\]|relay partition (\d+) released"
)


def holdings(log: Path) -> set[int]:
    """The relay partitions a process holds now, as its log tells."""
    held: set[int] = set()
    for match in _CHANGE.finditer(log.read_text()):
        verb, listed, released = match.groups()
        changed = {int(p) for p in (listed or released).split(",") if p.strip()}
        held = held | changed if verb == "taking" else held - changed
    return held


def drained(env: RelayTestEnv) -> bool:
    return env.sql("SELECT count(*) FROM outbox") == [(0,)]


@pytest.mark.long(25)
@pytest.mark.parametrize(
    "transactions", ["per-partition", "per-process"], ids=["partition-txn", "process-txn"]
)
def test_processes_share_the_partitions_and_take_over_a_dead_or_paused_ones(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path, transactions: str
) -> None:
    """With one transaction per relay partition and with one per process and cycle, the
    processes members of the positions group, a paused one's commits refused for its
    stale generation (KIP-447)."""
    env = relay_env
    mode = {"RELAY_PROCESS_TRANSACTIONS": str(transactions == "per-process").lower()}
    migrate(env.database_url, _PARTITIONS)
    logs = [tmp_path / f"relay-{name}.log" for name in "abc"]
    members = [
        start_relay(
            env,
            "run",
            log=log,
            RELAY_MEMBER_SESSION_TIMEOUT_MS=str(_SESSION_MS),
            RELAY_LOG_SUMMARY_S="0.1",  # each member's summary of what it published
            **mode,
        )
        for log in logs
    ]
    ids: set[int] = set()

    def explain() -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-6000:]}" for log in logs)

    spread = spread_between(logs)
    try:
        wait_until(spread, 90, "three members holding two relay partitions each", explain)
        ids |= write_events(env.database_url, topic, 300)
        wait_until(lambda: drained(env), 60, "the three members to publish", explain)
        assert all(" events in " in log.read_text() for log in logs), explain()

        a, b, c = members
        a.send_signal(signal.SIGKILL)
        a.wait()
        killed = time.monotonic()
        ids |= write_events(env.database_url, topic, 300)
        wait_until(lambda: drained(env), 90, "the others to take a killed member's over", explain)
        print(f"a killed member's partitions: rows out {time.monotonic() - killed:.1f} s later")

        os.kill(b.pid, signal.SIGSTOP)
        paused = time.monotonic()
        ids |= write_events(env.database_url, topic, 300)
        wait_until(lambda: drained(env), 90, "the last member to take a paused one's over", explain)
        print(f"a paused member's partitions: rows out {time.monotonic() - paused:.1f} s later")
        wait_until(
            lambda: holdings(logs[2]) == set(range(_PARTITIONS)), 60, "c to hold all", explain
        )
        os.kill(b.pid, signal.SIGCONT)

        wait_until(spread_between(logs[1:]), 90, "the resumed member to rejoin and share", explain)
        ids |= write_events(env.database_url, topic, 300)
        wait_until(lambda: drained(env), 60, "both members to publish after the resume", explain)
        assert b.poll() is None and c.poll() is None, explain()
        # c never left the group: no member may have fenced it as a departed process
        # (relay.kafka.departed_members), when the resumed b took partitions back from it.
        assert "found this process gone" not in logs[2].read_text(), explain()
    finally:
        codes = stop_members(members)
    assert codes[1:] == [0, 0], explain()  # SIGTERM: finish the batch, leave the group
    assert_exactly_once_in_order(read_committed(env.bootstrap_servers, topic), ids)


def spread_between(logs: list[Path]) -> Callable[[], bool]:
    """Whether every one of ``logs``' processes holds relay partitions, and together all."""

    def check() -> bool:
        held = [holdings(log) for log in logs]
        return all(held) and sorted(p for h in held for p in h) == list(range(_PARTITIONS))

    return check


def test_a_once_or_partitions_run_beside_live_members_is_refused(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """`relay run --once` (or `--partitions`, or the Spark job's driver) beside `relay
    run --partition-transactions` processes that share the partitions would fence them:
    they stall and log errors with no warning. It is refused with one line naming the
    members group instead, and nothing is published by it; once the members are gone it
    runs. (Beside members with one transaction per process, the default, it is refused
    even with --fence-members: test_process_transactions.py.)"""
    env = relay_env
    log = tmp_path / "member.log"
    member = start_relay(env, "run", "--partition-transactions", log=log)
    group = f"{env.prefix}-positions.members"
    try:
        wait_until(lambda: "taking relay partitions [" in log.read_text(), 60, "a member")
        ids = write_events(env.database_url, topic, 20)
        for args in (["--once"], ["--partitions", "0,1"]):
            refused = run_relay(env, "run", *args, timeout=60)
            assert refused.returncode == 2, refused.stderr
            last = refused.stderr.strip().splitlines()[-1]
            assert last.startswith("relay: error: "), refused.stderr
            assert f"1 member of group {group} is running" in last, last
            assert "--fence-members" in last, last
        settings = load_settings(environ=env.env())
        with pytest.raises(ConfigurationError, match=re.escape(group)):
            plan_relay_job(settings, None)  # the Spark job's driver refuses the same way
        assert "ERROR" not in log.read_text() and "CRITICAL" not in log.read_text()
        wait_until(lambda: drained(env), 60, "the member to publish", log.read_text)
    finally:
        member.terminate()
        member.wait(60)
    assert member.returncode == 0, log.read_text()
    again = run_relay(env, "run", "--once")  # the member left the group when it stopped
    assert again.returncode == 0, again.stderr
    assert_exactly_once_in_order(read_committed(env.bootstrap_servers, topic), ids)
