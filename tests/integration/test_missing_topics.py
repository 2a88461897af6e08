"""One row for a topic that does not exist never stalls its relay partition for longer than
``--missing-topic-wait``: it is waited for, then moved to outbox_dead_letters, and the rows
of other keys behind it are published; the later rows of its key follow it to the dead
letters (I2), and a replay brings the key's dead letters back in their order."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import relay
from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.support import (
    RelayTestEnv,
    read_committed,
    run_relay,
    start_relay,
    wait_until,
)
from tests.integration.writes import publish_events
from tests.partitioning import partition_of

WAIT_S = 3.0
MARGIN_S = 20.0  # the process's start-up, fencing and a loaded machine


def _keys(count: int, partition: int = 0) -> list[str]:
    """Keys of one relay partition: they share its batches."""
    candidates = (f"stall-{n}" for n in range(10_000))
    return [k for k in candidates if partition_of(k.encode(), RELAY_PARTITIONS) == partition][
        :count
    ]


def _values(env: RelayTestEnv, topic: str, key: str) -> list[Any]:
    return [
        json.loads(r.value or b"null")
        for r in read_committed(env.bootstrap_servers, topic)
        if r.key == key.encode()
    ]


def _dead_letters(env: RelayTestEnv) -> list[tuple[Any, ...]]:
    return env.sql("SELECT id, outbox_id, topic, key, error FROM outbox_dead_letters ORDER BY seq")


@pytest.mark.long(40)
def test_a_missing_topic_delays_other_keys_by_the_bounded_wait_only(
    relay_env: RelayTestEnv, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    missing = f"typo-{relay_env.prefix}"
    held, other = _keys(2)
    (typo_id,) = publish_events(relay_env.database_url, [relay.Event(missing, held, {"n": 0})])
    publish_events(
        relay_env.database_url,
        [relay.Event(topic, other, {"n": n}) for n in range(5)]
        + [relay.Event(topic, held, {"n": 1})],
    )

    log = tmp_path / "relay.log"
    started = time.monotonic()
    service = start_relay(relay_env, "run", log=log, RELAY_MISSING_TOPIC_WAIT_S=str(WAIT_S))
    try:
        wait_until(
            lambda: _values(relay_env, topic, other) == list({"n": n} for n in range(5)),
            WAIT_S + MARGIN_S,
            "the other key's events behind the missing topic's row",
            explain=log.read_text,
        )
        elapsed = time.monotonic() - started
        assert elapsed < WAIT_S + MARGIN_S
        dead = _dead_letters(relay_env)
        assert [(r[1], r[2]) for r in dead[:1]] == [(typo_id, missing)]
        assert f"topic '{missing}' does not exist" in str(dead[0][4])
        assert "--missing-topic-wait" in str(dead[0][4])
        # The key's later row follows its dead letter instead of overtaking it.
        assert [bytes(r[3]) for r in dead] == [held.encode(), held.encode()]  # type: ignore[arg-type]
        assert f"follows dead letter {dead[0][0]}" in str(dead[1][4])
        assert _values(relay_env, topic, held) == []
        text = log.read_text()
        assert "ERROR" in text and "to outbox_dead_letters" in text

        # Nothing waits any more: the other key's next events go out at once, and the
        # held key's next one follows its dead letters.
        publish_events(
            relay_env.database_url,
            [relay.Event(topic, other, {"n": 5}), relay.Event(topic, held, {"n": 2})],
        )
        wait_until(
            lambda: (
                len(_values(relay_env, topic, other)) == 6 and len(_dead_letters(relay_env)) == 3
            ),
            MARGIN_S,
            "the next events",
        )
        assert "follows dead letter" in str(_dead_letters(relay_env)[2][4])
    finally:
        service.terminate()
        service.wait(60)
    assert service.returncode == 0, log.read_text()


def test_relay_run_once_dead_letters_after_the_wait_and_exits_0(
    relay_env: RelayTestEnv, make_topic: Callable[..., str], kafka_admin: AdminClient
) -> None:
    topic = make_topic(partitions=1)
    missing = f"typo-{relay_env.prefix}"
    held, other = _keys(2)
    publish_events(
        relay_env.database_url,
        [relay.Event(topic, held, {"n": 0}), relay.Event(missing, held, {"n": 1})]
        + [relay.Event(topic, other, {"n": n}) for n in range(3)]
        + [relay.Event(topic, held, {"n": 2}), relay.Event(topic, held, {"n": 3})],
    )

    result = run_relay(relay_env, "run", "--once", RELAY_MISSING_TOPIC_WAIT_S="1")
    assert result.returncode == 0, result.stderr
    assert _values(relay_env, topic, other) == [{"n": n} for n in range(3)]
    assert _values(relay_env, topic, held) == [{"n": 0}]
    dead = _dead_letters(relay_env)
    assert [r[2] for r in dead] == [missing, topic, topic]
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]

    # The way out: create the topic, then replay. The key's dead letters go back
    # together, in their order, even when only the first is named.
    kafka_admin.create_topics([NewTopic(missing, 1, replication_factor=-1)])[missing].result(30)
    replayed = run_relay(relay_env, "dead-letters", "replay", "--all", "--topic", missing, "--yes")
    assert replayed.returncode == 0, replayed.stderr
    assert relay_env.sql("SELECT count(*) FROM outbox_dead_letters") == [(0,)]
    again = run_relay(relay_env, "run", "--once", RELAY_MISSING_TOPIC_WAIT_S="1")
    assert again.returncode == 0, again.stderr
    assert _values(relay_env, missing, held) == [{"n": 1}]
    assert _values(relay_env, topic, held) == [{"n": 0}, {"n": 2}, {"n": 3}]
    seqs = {
        json.loads(r.value or b"null")["n"]: r.seq
        for name in (topic, missing)
        for r in read_committed(relay_env.bootstrap_servers, name)
        if r.key == held.encode()
    }
    assert seqs[0] < seqs[1] < seqs[2] < seqs[3]  # the key's order, across both topics
    kafka_admin.delete_topics([missing])


def test_status_and_readiness_name_the_row_a_partition_waits_for(
    relay_env: RelayTestEnv, tmp_path: Path
) -> None:
    missing = f"typo-{relay_env.prefix}"
    (held,) = _keys(1)
    (typo_id,) = publish_events(relay_env.database_url, [relay.Event(missing, held, {"n": 0})])
    log = tmp_path / "relay.log"
    service = start_relay(relay_env, "run", log=log, RELAY_MISSING_TOPIC_WAIT_S="600")
    try:
        wait_until(lambda: "retrying" in log.read_text(), 60, "the relay to retry")

        def held_up_by() -> list[str]:
            result = run_relay(relay_env, "status", "--output", "json", "--partitions", "0")
            assert result.returncode == 0, result.stderr
            (partition,) = json.loads(result.stdout)["outbox"]
            return list(partition["held_up_by"])

        wait_until(lambda: bool(held_up_by()), 30, "relay status to name the row")
        (line,) = held_up_by()
        result = run_relay(relay_env, "status", "--output", "json", "--partitions", "0")
        stall = json.loads(result.stdout)["outbox"][0]["stall"]
        assert (stall["outbox_id"], stall["topic"]) == (typo_id, missing)
        assert stall["reason"].startswith(f"topic '{missing}' does not exist")
        assert f"since {stall['since'][:19]}" in line  # to the second, UTC
        assert f"outbox row {typo_id}" in line
        assert f"topic '{missing}' does not exist" in line
        assert " since " in line
        text = run_relay(relay_env, "status", "--partitions", "0")
        assert f"outbox row {typo_id}" in text.stdout
        assert "does not exist" in log.read_text().split("retrying")[0].splitlines()[-1]
    finally:
        service.terminate()
        service.wait(60)
    assert service.returncode == 0, log.read_text()
    # Stopped: nothing holds the partition any more.
    result = run_relay(relay_env, "status", "--output", "json", "--partitions", "0")
    assert json.loads(result.stdout)["outbox"][0]["held_up_by"] == []
    assert json.loads(result.stdout)["outbox"][0]["stall"] is None
