"""`relay run` with one Kafka transaction per process and cycle (the default),
fenced by the positions group's generation (KIP-447, I3).

A member paused inside its transaction, whose partitions the group gave to another
member meanwhile, has its commit refused when it resumes; a `--once` run beside a member
is refused whichever starts first. The sharing of partitions, kill -9 and a pause past
the session timeout: tests/integration/test_shared_partitions.py (process-txn).
"""

from __future__ import annotations

import os
import signal
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

import relay
from relay.chaos.process_tree import is_stopped
from relay.devenv.waiting import wait_until
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    read_committed,
    run_relay,
    start_relay,
    stop_members,
)
from tests.integration.writes import publish_events, write_events

_SESSION_MS = "6000"  # the broker's group.min.session.timeout.ms
_PROCESS = {"RELAY_PROCESS_TRANSACTIONS": "true", "RELAY_MEMBER_SESSION_TIMEOUT_MS": _SESSION_MS}


def _drained(env: RelayTestEnv) -> bool:
    return env.sql("SELECT count(*) FROM outbox") == [(0,)]


def _ends(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    """Each partition's end as a consumer of ``isolation`` sees it: the high watermark
    (read_uncommitted), or the last stable offset (read_committed), which an open
    transaction holds back at its first record."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "ends", "isolation.level": isolation}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30, cached=False)[1]
            for p in partitions
        }
    finally:
        consumer.close()


def _held_back(env: RelayTestEnv, topic: str) -> dict[int, tuple[int, int]]:
    """The partitions whose last stable offset is below their high watermark."""
    stable = _ends(env.bootstrap_servers, topic, "read_committed")
    high = _ends(env.bootstrap_servers, topic, "read_uncommitted")
    return {p: (stable[p], high[p]) for p in high if stable[p] < high[p]}


def _stable_past(env: RelayTestEnv, topic: str, left_open: dict[int, tuple[int, int]]) -> bool:
    """Whether each partition ``left_open`` held back is stable past what it held back
    (the open transaction was aborted)."""
    stable = _ends(env.bootstrap_servers, topic, "read_committed")
    return all(stable[p] >= high for p, (_, high) in left_open.items())


def _tails(*logs: Path) -> str:
    """The end of each member's log, for a failure's message."""
    return "\n".join(f"--- {p.name}\n{p.read_text()[-5000:]}" for p in logs if p.exists())


def _says(log: Path, text: str) -> bool:
    return text in log.read_text()


@pytest.mark.long(40)
def test_a_member_paused_in_its_transaction_cannot_commit_after_the_group_moved_on(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """A pauses itself with its transaction open (records sent, positions not yet
    committed); B takes every partition over after the session timeout and publishes the
    same rows; A resumes and commits: the broker (or A itself, once librdkafka knows it
    left) refuses the positions of a stale generation, so A's records are aborted and
    every row is read exactly once."""
    env = relay_env
    paused = tmp_path / "paused"
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    a = start_relay(
        env, "run", log=a_log, RELAY_FAILPOINTS=f"before_commit=stop,once={paused}", **_PROCESS
    )
    b = None
    explain = partial(_tails, a_log, b_log)

    try:
        wait_until(lambda: "taking relay partitions [0, 1, 2, 3]" in a_log.read_text(), 60, "A")
        ids = write_events(env.database_url, topic, 200)
        wait_until(lambda: paused.exists() and is_stopped(a.pid), 60, "A to pause", explain)
        b = start_relay(env, "run", log=b_log, **_PROCESS)
        wait_until(lambda: _drained(env), 90, "B to take over and publish", explain)
        os.kill(a.pid, signal.SIGCONT)
        wait_until(
            lambda: (
                "no longer a member" in a_log.read_text()
                or "ILLEGAL_GENERATION" in a_log.read_text()
                or "UNKNOWN_MEMBER_ID" in a_log.read_text()
            ),
            60,
            "A's commit to be refused",
            explain,
        )
        ids |= write_events(env.database_url, topic, 200)
        wait_until(lambda: _drained(env), 90, "the members to publish after the resume", explain)
    finally:
        stop_members([a, b])
    assert_exactly_once_in_order(read_committed(env.bootstrap_servers, topic), ids)


def test_a_once_run_beside_a_process_member_is_refused_even_with_fence_members(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """The member first: --once refuses at start-up (a member's transactions cannot be
    fenced by a run of its own), with or without --fence-members; nothing is published
    twice."""
    env = relay_env
    log = tmp_path / "member.log"
    member = start_relay(env, "run", log=log, **_PROCESS)
    try:
        wait_until(lambda: "taking relay partitions [" in log.read_text(), 60, "a member")
        ids = write_events(env.database_url, topic, 50)
        for extra in ({}, {"RELAY_FENCE_MEMBERS": "true"}):
            refused = run_relay(env, "run", "--once", timeout=60, **extra)
            assert refused.returncode == 2, refused.stderr
            last = refused.stderr.strip().splitlines()[-1]
            assert f"1 member of group {env.prefix}-positions" in last, last
            assert "one transaction per process" in last, last
        wait_until(lambda: _drained(env), 60, "the member to publish", log.read_text)
    finally:
        member.terminate()
        member.wait(60)
    assert member.returncode == 0, log.read_text()
    assert_exactly_once_in_order(read_committed(env.bootstrap_servers, topic), ids)


@pytest.mark.long(30)
def test_a_member_that_joins_while_a_once_run_publishes_fences_it(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """--once first, holding a transaction open; a member joins and takes the partitions:
    it initialises each partition's own transactional id, which aborts --once's
    transaction and fences it. --once stops (fenced, or refused when it starts a
    partition again), the member publishes, every row exactly once."""
    env = relay_env
    held = tmp_path / "held"
    ids = write_events(env.database_url, topic, 200)
    once_log, log = tmp_path / "once.log", tmp_path / "member.log"
    once = start_relay(
        env, "run", "--once", log=once_log, RELAY_FAILPOINTS=f"after_produce=hold,once={held}"
    )
    member = None
    try:
        wait_until(held.exists, 60, "--once to hold a transaction open", once_log.read_text)
        member = start_relay(env, "run", log=log, **_PROCESS)
        wait_until(lambda: "taking relay partitions [0, 1, 2, 3]" in log.read_text(), 60, "member")
        wait_until(lambda: _drained(env), 90, "the member to publish", log.read_text)
        Path(f"{held}.release").touch()
        code = once.wait(90)
        assert code != 0, once_log.read_text()
        assert "fenced" in once_log.read_text() or "per process" in once_log.read_text()
        ids |= write_events(env.database_url, topic, 50)
        wait_until(lambda: _drained(env), 60, "the member to go on", log.read_text)
    finally:
        stop_members([once, member], timeout_s=60)
    assert "ERROR" not in log.read_text(), log.read_text()
    assert_exactly_once_in_order(read_committed(env.bootstrap_servers, topic), ids)


@pytest.mark.long(50)
def test_a_member_restarted_under_its_name_aborts_the_transaction_it_left_open(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """A (--member-id m1) is killed with its transaction's records on the broker, which
    hold read_committed readers back. Restarted under the same name, its
    init_transactions aborts that transaction at once: the readers see past it in
    seconds, not after transaction.timeout.ms (60 s here), and every row is published
    once."""
    env = relay_env
    held = tmp_path / "held"
    named = {**_PROCESS, "RELAY_MEMBER_ID": "m1", "RELAY_TRANSACTION_TIMEOUT_MS": "60000"}
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    a = start_relay(
        env, "run", log=a_log, RELAY_FAILPOINTS=f"before_commit=hold,once={held}", **named
    )
    b = None
    explain = partial(_tails, a_log, b_log)

    try:
        wait_until(lambda: "taking relay partitions [0, 1, 2, 3]" in a_log.read_text(), 60, "A")
        ids = write_events(env.database_url, topic, 200)
        wait_until(held.exists, 60, "A to hold its transaction open", explain)
        wait_until(lambda: bool(_held_back(env, topic)), 30, "A's records on the broker", explain)
        a.kill()
        a.wait(30)
        left_open = _held_back(env, topic)
        b = start_relay(env, "run", log=b_log, **named)
        wait_until(
            partial(_stable_past, env, topic, left_open),
            20,
            f"the restart to abort the transaction left open {left_open}",
            explain,
        )
        wait_until(lambda: _drained(env), 60, "the restarted member to publish", explain)
    finally:
        stop_members([a, b])
    assert_exactly_once_in_order(read_committed(env.bootstrap_servers, topic), ids)


def test_member_id_is_refused_where_no_member_of_the_positions_group_runs(
    relay_env: RelayTestEnv,
) -> None:
    refused = run_relay(relay_env, "run", "--once", "--member-id", "m1", timeout=60)
    assert refused.returncode == 2, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert "--member-id (RELAY_MEMBER_ID) names a member of the positions group" in last, last


@pytest.mark.long(40)
def test_processes_with_and_without_process_transactions_refuse_to_share_an_outbox(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """Side by side, the two kinds would publish rows twice (a member fences a relay
    partition's own transactional id only when it takes it): whichever starts second
    refuses with exit 2, and the rows are published once."""
    env = relay_env
    plain = {"RELAY_MEMBER_SESSION_TIMEOUT_MS": _SESSION_MS, "RELAY_PROCESS_TRANSACTIONS": "false"}
    ids: set[int] = set()
    group = f"{env.prefix}-positions"  # one transaction per process; + ".members" per partition
    cases = (  # who runs first, who is refused, and what it says
        (_PROCESS, plain, f"1 process with one transaction per process (members of group {group})"),
        (plain, _PROCESS, f"1 process with one transaction per relay partition (members of group {group}.members"),  # noqa: E501
    )  # fmt: skip
    for first, second, said in cases:
        log = tmp_path / f"first-{len(ids)}.log"
        running = start_relay(env, "run", log=log, **first)
        try:
            wait_until(partial(_says, log, "taking relay partitions ["), 60, "the first")
            ids |= write_events(env.database_url, topic, 50)
            refused = run_relay(env, "run", timeout=60, **second)
            assert refused.returncode == 2, refused.stderr
            last = refused.stderr.strip().splitlines()[-1]
            assert said in last and "would publish rows twice" in last, last
            wait_until(lambda: _drained(env), 60, "the first to publish", log.read_text)
        finally:
            (code,) = stop_members([running])
        assert code == 0, log.read_text()
    assert_exactly_once_in_order(read_committed(env.bootstrap_servers, topic), ids)


def _keys_of(env: RelayTestEnv, partitions: set[int], count: int) -> list[str]:
    """``count`` keys whose relay partitions (of the test outbox's 4) are in
    ``partitions``, each partition's in turn."""
    found: dict[int, list[str]] = {p: [] for p in partitions}
    n = 0
    while min(len(keys) for keys in found.values()) < count // len(partitions) + 1:
        key = f"key-{n}"
        [(p,)] = env.sql("SELECT outbox_partition_of(convert_to(:k, 'UTF8'), 4)", k=key)
        if p in found:
            found[p].append(key)
        n += 1
    cycle = [key for keys in zip(*found.values(), strict=False) for key in keys]
    return cycle[:count]


def _write_keys(env: RelayTestEnv, topic: str, keys: list[str], start: int) -> set[int]:
    events = [relay.Event(topic, key, {"n": start + i}) for i, key in enumerate(keys)]
    return publish_events(env.database_url, events)


@pytest.mark.long(50)
def test_a_member_taking_over_aborts_the_transaction_a_killed_member_left_open(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """A (a random name) publishes relay partitions 0-2, then is killed with a transaction
    open (its records on the broker, relay partition 3's part held). B, a new process,
    takes the partitions over: their positions name A, which is no longer a member, so B
    fences A's transactional id, which aborts the transaction at once. read_committed
    readers see past it in seconds, not after transaction.timeout.ms (60 s here), and
    every row is published once."""
    env = relay_env
    held = tmp_path / "held"
    timeout = {"RELAY_TRANSACTION_TIMEOUT_MS": "60000"}
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    a = start_relay(
        env,
        "run",
        log=a_log,
        RELAY_FAILPOINTS=f"before_commit=hold,once={held},partition=3",
        **_PROCESS,
        **timeout,
    )
    b = None
    explain = partial(_tails, a_log, b_log)
    try:
        wait_until(lambda: "taking relay partitions [0, 1, 2, 3]" in a_log.read_text(), 60, "A")
        ids = _write_keys(env, topic, _keys_of(env, {0, 1, 2}, 60), 0)
        wait_until(lambda: _drained(env), 60, "A to publish relay partitions 0-2", explain)
        ids |= _write_keys(env, topic, _keys_of(env, {0, 1, 2, 3}, 80), 60)
        wait_until(held.exists, 60, "A to hold its transaction open", explain)
        wait_until(lambda: bool(_held_back(env, topic)), 30, "A's records on the broker", explain)
        a.kill()
        a.wait(30)
        left_open = _held_back(env, topic)
        b = start_relay(env, "run", log=b_log, **_PROCESS, **timeout)
        wait_until(
            partial(_stable_past, env, topic, left_open),
            25,
            f"B to abort the transaction A left open {left_open}",
            explain,
        )
        wait_until(lambda: _drained(env), 60, "B to publish", explain)
    finally:
        stop_members([a, b])
    assert "is no longer a member of group" in b_log.read_text(), b_log.read_text()
    assert_exactly_once_in_order(read_committed(env.bootstrap_servers, topic), ids)
