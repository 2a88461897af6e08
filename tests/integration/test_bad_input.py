"""Bad input never loses rows silently: refused records become dead letters, and a missing
topic holds its rows in the outbox while it is waited for (--missing-topic-wait)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from sqlalchemy.pool import NullPool

import relay
from relay.kafka.publisher import record_headers
from relay.kafka.topics import single_record_batch_size
from relay.publishing.events import decode_headers_json
from relay.publishing.types import OutboxRecord
from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    draw,
    read_committed,
    run_relay,
    start_relay,
    wait_until,
)
from tests.integration.writes import publish_events
from tests.partitioning import partition_of

LIMIT = 4000


def _write_sized(env: RelayTestEnv, topic: str, key: str, target: int) -> int:
    """Commit one event of ``key`` whose one-record batch is exactly ``target`` bytes,
    headers (outbox id, position, partition, the event's: its event-id) included: the
    transaction is drawn alone, so its position is the next one. Its id."""
    drawn = draw(env.database_url)
    engine = sa.create_engine(env.database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            relay.publish(conn, topic, key, b"")
            ((outbox_id, headers),) = conn.execute(
                sa.text("SELECT id, headers::text FROM outbox WHERE txid = pg_current_xact_id()")
            ).all()
            record = OutboxRecord(
                int(outbox_id),
                partition_of(key.encode(), RELAY_PARTITIONS),
                drawn + 1,
                topic,
                key.encode(),
                b"",
                None,
                decode_headers_json(headers),
            )
            headers_sent = record_headers(record)
            length = target - single_record_batch_size(record.key, b"", headers_sent)
            while single_record_batch_size(record.key, b"v" * length, headers_sent) > target:
                length -= 1
            assert single_record_batch_size(record.key, b"v" * length, headers_sent) == target
            conn.execute(
                sa.text("UPDATE outbox SET value = :v WHERE id = :i"),
                {"v": b"v" * length, "i": outbox_id},
            )
    finally:
        engine.dispose()
    assert draw(env.database_url) == drawn + 1
    return int(outbox_id)


def test_records_kafka_refuses_go_to_dead_letters_and_the_rest_is_published(
    relay_env: RelayTestEnv, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2, config={"max.message.bytes": str(LIMIT)})
    # Keys of their own for the refused rows: a key's rows after its dead letter would
    # follow it (test_missing_topics.py, test_dead_letter_tools.py).
    events = [relay.Event(topic, "same-key", {"n": n}) for n in range(10)]
    events.insert(7, relay.Event(topic, "big-key", b"y" * 1_200_000))  # over the client's limit
    ids = publish_events(relay_env.database_url, events)
    edge_ids = [  # the broker's own boundary
        _write_sized(relay_env, topic, f"edge-{n}", LIMIT + delta)
        for n, delta in enumerate((-1, 0, 1, 2))
    ]
    ids |= set(edge_ids)
    refused = {
        int(r[0]) for r in relay_env.sql("SELECT id FROM outbox WHERE length(value) > 1000000")
    }  # type: ignore[call-overload]
    refused |= set(edge_ids[2:])

    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr
    assert "to outbox_dead_letters" in result.stderr
    assert "MSG_SIZE_TOO_LARGE" in result.stderr

    dead = relay_env.sql("SELECT outbox_id, error FROM outbox_dead_letters")
    assert {int(r[0]) for r in dead} == refused  # type: ignore[call-overload]
    assert all("MSG_SIZE_TOO_LARGE" in str(r[1]) for r in dead)
    consumed = read_committed(relay_env.bootstrap_servers, topic)
    assert_exactly_once_in_order(consumed, ids - refused)
    assert [r.value for r in consumed if r.key == b"same-key"] == [
        b'{"n":%d}' % n for n in range(10)
    ]
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]


def test_missing_topic_keeps_rows_until_it_exists(
    relay_env: RelayTestEnv, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    topic = f"created-later-{relay_env.prefix}"
    ids = publish_events(
        relay_env.database_url, [relay.Event(topic, f"k{n}", {"n": n}) for n in range(20)]
    )

    log = tmp_path / "relay.log"
    # Within --missing-topic-wait (test_missing_topics.py: after it, dead letters).
    service = start_relay(relay_env, "run", log=log, RELAY_MISSING_TOPIC_WAIT_S="600")
    try:
        wait_until(lambda: "does not exist" in log.read_text(), 60, "the relay to report it")
        assert f"topic '{topic}' does not exist" in log.read_text()
        assert service.poll() is None  # the service keeps running and retrying
        assert relay_env.sql("SELECT count(*) FROM outbox_dead_letters") == [(0,)]
        kafka_admin.create_topics([NewTopic(topic, 3, replication_factor=-1)])[topic].result(30)
        wait_until(
            lambda: relay_env.sql("SELECT count(*) FROM outbox") == [(0,)],
            90,
            "the relay to publish once the topic exists",
        )
    finally:
        service.terminate()
        service.wait(60)
    assert service.returncode == 0, log.read_text()
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), ids)
    kafka_admin.delete_topics([topic])


MALFORMED_HEADERS = (
    ('[["trace", "!!not base64!!"]]', "not base64"),
    ('[["trace"]]', "[name, base64 value or null]"),
    ('[["outbox-id", "MQ=="]]', "set by the relay itself"),  # would override ours
    ('[["event-type", "ZXZpbA=="]]', "set by the relay itself"),
)


@pytest.mark.parametrize("batch_size", [1000, 2], ids=["batches of 1000", "batches of 2"])
def test_rows_written_by_plain_sql_that_cannot_become_records_are_dead_lettered(
    relay_env: RelayTestEnv, topic: str, batch_size: int
) -> None:
    """Rows from plain SQL, COPY or another language with malformed headers go to
    outbox_dead_letters; the good rows around them are published; the run exits 0, also
    when a whole batch is malformed. Headers that are not even an array are refused by
    the database itself."""
    with pytest.raises(sa.exc.IntegrityError, match="outbox_headers_array"):
        relay_env.sql(
            "INSERT INTO outbox (topic, key, value, headers) "
            """VALUES (:t, 'k', '\\x7b7d', '{"trace": "abc"}')""",
            t=topic,
        )
    good_before = publish_events(
        relay_env.database_url, [relay.Event(topic, "k", {"n": n}) for n in range(3)]
    )
    for headers, _ in MALFORMED_HEADERS:
        relay_env.sql(
            "INSERT INTO outbox (topic, key, value, headers) "
            "VALUES (:t, 'k', '\\x7b7d', CAST(:h AS jsonb))",
            t=topic,
            h=headers,
        )
    bad = {int(r[0]) for r in relay_env.sql("SELECT id FROM outbox")} - good_before  # type: ignore[call-overload]
    good = good_before | publish_events(
        relay_env.database_url, [relay.Event(topic, "other", {"n": n}) for n in range(3, 6)]
    )
    # A later row of the bad rows' key follows their dead letters (I2).
    following = publish_events(relay_env.database_url, [relay.Event(topic, "k", {"n": 6})])

    result = run_relay(relay_env, "run", "--once", RELAY_BATCH_SIZE=str(batch_size))
    assert result.returncode == 0, result.stderr

    dead = dict(relay_env.sql("SELECT outbox_id, error FROM outbox_dead_letters"))  # type: ignore[arg-type]
    assert set(dead) == bad | following
    assert "follows dead letter" in str(dead[min(following)])
    for (headers, reason), outbox_id in zip(MALFORMED_HEADERS, sorted(bad), strict=True):
        assert reason in str(dead[outbox_id]), (headers, dead[outbox_id])
    consumed = read_committed(relay_env.bootstrap_servers, topic)
    assert_exactly_once_in_order(consumed, good)
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]
