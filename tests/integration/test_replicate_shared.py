"""Continuous `relay replicate` instances share the source partitions (issue 21, part 3).

Three instances join the members group on the target cluster and divide six source
partitions: each copies only its own. One is killed (SIGKILL): the others take its
partitions over within the session timeout. Then one is paused (SIGSTOP) past its
session and resumed: the last one takes everything over and fences it, and the resumed
one rejoins and shares again. The target holds every committed source record exactly
once (counted per source offset, from the relay-source-offset header).
A `--once` run (or the Spark job's driver) beside live members is refused.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from relay.errors import ConfigurationError
from relay.replication.startup import READY
from relay.settings.replicate import load_replicate_settings
from tests.integration.replicate_support import (
    ReplicaEnv,
    assert_replica,
    read_log,
    write_transactions,
)
from tests.integration.support import stop_members, wait_until

pytestmark = pytest.mark.integration

_PARTITIONS = 6
_SESSION_MS = 6000  # the broker's group.min.session.timeout.ms
_CHANGE = re.compile(
    r"(taking|handing) source partitions \[(.*)\](?: on)?$|source partition \S+\[(\d+)\] released",
    re.MULTILINE,
)


def holdings(log: Path) -> set[int]:
    """The source partitions an instance holds now, as its log tells."""
    held: set[int] = set()
    for match in _CHANGE.finditer(log.read_text()):
        verb, listed, released = match.groups()
        changed = {int(released)} if released else set(_listed(listed))
        held = held | changed if verb == "taking" else held - changed
    return held


def _listed(listed: str) -> list[int]:
    return [int(p) for p in re.findall(r"\[(\d+)\](?:,|$)", listed)]


def taken(log: Path) -> Counter[int]:
    """How many times the group gave an instance each source partition."""
    found = re.findall(r"taking source partitions \[(.*)\]$", log.read_text(), re.MULTILINE)
    return Counter(p for listed in found for p in _listed(listed))


def started(log: Path) -> Counter[int]:
    """How many times an instance started copying each source partition (fenced it)."""
    found = re.findall(rf"\[(\d+)\]: {re.escape(READY)}", log.read_text())
    return Counter(int(p) for p in found)


def retaken(log: Path) -> Counter[int]:
    """How many times an instance started again a source partition that was fenced while
    the group still gave it to this instance (a stale assignment, later confirmed)."""
    found = re.findall(r"\[(\d+)\]: still assigned here, taking it back", log.read_text())
    return Counter(int(p) for p in found)


def started_only_when_given(logs: list[Path]) -> str | None:
    """Why an instance started a source partition more often than the group gave it one
    (the log's name and the partitions), or None: each start answers a hand-over or a
    retake. A hand-over revoked before its start logged nothing is no start."""
    for log in logs:
        given = taken(log) + retaken(log)
        extra = {p: n for p, n in started(log).items() if n > given[p]}
        if extra:
            return f"{log.name} started {extra} more often than given {dict(given)}"
    return None


def spread_between(logs: list[Path]) -> Callable[[], bool]:
    """Whether every one of ``logs``' instances holds source partitions, and together
    each partition once."""

    def check() -> bool:
        held = [holdings(log) for log in logs]
        return all(held) and sorted(p for h in held for p in h) == list(range(_PARTITIONS))

    return check


def copied(
    replica: ReplicaEnv, topic: str, target: str, partitions: int = _PARTITIONS
) -> Callable[[], bool]:
    """Whether the target has caught up with every committed source record."""

    def check() -> bool:
        source = read_log(replica.source, topic, partitions)
        copies = read_log(replica.target, target, partitions)
        return all(len(copies[p]) >= len(source[p]) for p in source)

    return check


@pytest.mark.long(90)
def test_instances_share_the_source_partitions_and_take_over_a_killed_or_paused_ones(
    replica: ReplicaEnv, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("repl-share", partitions=_PARTITIONS)
    target = f"sh.{topic}"
    n = write_transactions(replica.source, topic, transactions=12, per_transaction=30)
    args = ("--topics", topic, "--target-prefix", "sh.", "--batch-size", "40")
    logs = [tmp_path / f"replicate-{name}.log" for name in "abc"]
    members = [
        replica.start(*args, log=log, RELAY_REPLICATE_MEMBER_SESSION_TIMEOUT_MS=str(_SESSION_MS))
        for log in logs
    ]

    def explain() -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-6000:]}" for log in logs)

    try:
        wait_until(spread_between(logs), 90, "three members holding two partitions each", explain)
        wait_until(copied(replica, topic, target), 60, "the backlog copied", explain)
        # Each instance started (fenced) a partition only when the group gave it that one,
        # so it copies only its own, not every partition.
        assert (extra := started_only_when_given(logs)) is None, extra

        a, b, c = members
        moved = holdings(logs[0])
        a.send_signal(signal.SIGKILL)
        a.wait()
        killed = time.monotonic()
        n = write_transactions(replica.source, topic, transactions=12, per_transaction=30, first=n)
        wait_until(spread_between(logs[1:]), 60, "the others to take a killed one's over", explain)
        took_over = time.monotonic() - killed
        wait_until(copied(replica, topic, target), 60, "the rest copied", explain)
        print(f"a killed instance's partitions {sorted(moved)} taken over {took_over:.1f} s later")
        assert took_over < 2 * _SESSION_MS / 1000, explain()
        assert b.poll() is None and c.poll() is None, explain()
        assert (extra := started_only_when_given(logs[1:])) is None, extra

        # A zombie: b paused past its session; c takes everything over and fences it.
        os.kill(b.pid, signal.SIGSTOP)
        paused = time.monotonic()
        n = write_transactions(replica.source, topic, transactions=12, per_transaction=30, first=n)
        wait_until(lambda: holdings(logs[2]) == set(range(_PARTITIONS)), 60, "c: all", explain)
        wait_until(copied(replica, topic, target), 60, "c to copy b's", explain)
        print(f"a paused instance's partitions copied {time.monotonic() - paused:.1f} s later")
        os.kill(b.pid, signal.SIGCONT)
        wait_until(spread_between(logs[1:]), 90, "the resumed one to rejoin and share", explain)
        write_transactions(replica.source, topic, transactions=12, per_transaction=30, first=n)
        wait_until(copied(replica, topic, target), 60, "both to copy after the resume", explain)
        assert b.poll() is None and c.poll() is None, explain()
    finally:
        codes = stop_members(members)
    assert codes[1:] == [0, 0], explain()  # SIGTERM: finish the transactions, leave the group
    source = read_log(replica.source, topic, _PARTITIONS)
    copies = read_log(replica.target, target, _PARTITIONS)
    for p, records in source.items():
        per_offset = Counter(c.source_offset() for c in copies[p])
        assert per_offset == Counter(r.offset for r in records), f"partition {p}"
    assert_replica(source, copies)


def test_a_once_run_beside_live_members_is_refused_unless_it_fences_them(
    replica: ReplicaEnv, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """`relay replicate --once` (or the Spark job's driver) beside continuous instances
    that share the partitions would fence them: it is refused with one line naming the
    members group, and copies nothing; `--fence-members` runs it anyway."""
    topic = make_topic("repl-once-beside", partitions=2)
    args = ("--topics", topic, "--target-prefix", "ob.")
    log = tmp_path / "member.log"
    member = replica.start(*args, log=log)
    group = f"{replica.group}.members"
    try:
        wait_until(lambda: len(holdings(log)) == 2, 60, "a member", log.read_text)
        write_transactions(replica.source, topic, transactions=4, per_transaction=10)
        refused = replica.run("--once", *args, timeout=60)
        assert refused.returncode == 2, refused.stderr
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith("relay: error: "), refused.stderr
        assert f"1 member of group {group} is running `relay replicate`" in last, last
        assert "--fence-members" in last, last
        assert "copied" not in refused.stdout
        settings = load_replicate_settings(
            environ=replica.env(RELAY_REPLICATE_TOPICS=topic, RELAY_REPLICATE_TARGET_PREFIX="ob.")
        )
        from jobs.replicate import plan  # the Spark job's driver

        with pytest.raises(ConfigurationError, match=re.escape(group)):
            plan(settings)
        forced = replica.run("--once", *args, "--fence-members", timeout=120)
        assert forced.returncode == 0, forced.stderr
        wait_until(copied(replica, topic, f"ob.{topic}", 2), 60, "the copies", log.read_text)
        assert member.poll() is None, log.read_text()  # fenced partitions only: it goes on
    finally:
        member.terminate()
        member.wait(60)
    assert member.returncode == 0, log.read_text()
    again = replica.run("--once", *args)  # the member left the group when it stopped
    assert again.returncode == 0, again.stderr
    assert_replica(read_log(replica.source, topic, 2), read_log(replica.target, f"ob.{topic}", 2))
