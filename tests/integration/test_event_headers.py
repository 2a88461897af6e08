"""The headers an event's Kafka record carries, on the real servers: the event id the write
API gave it (what ``relay.publish`` returned), and a header with a null value as a null
Kafka header, whether written by the write API or by plain SQL."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay
from tests.integration.support import RelayTestEnv, read_committed, run_relay


def test_the_event_id_and_null_headers_arrive_in_kafka(relay_env: RelayTestEnv, topic: str) -> None:
    chosen = relay.new_event_id()
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    with engine.begin() as conn:
        returned = relay.publish(
            conn, topic, "api", {"n": 1}, [("trace", "t1"), ("gone", None)], event_type="E"
        )
        relay.publish_many(conn, [relay.Event(topic, "many", {"n": 2}, event_id=chosen)])
    engine.dispose()
    # Plain SQL: a null header value as JSON null; its own event-id, or none at all.
    relay_env.sql(
        "INSERT INTO outbox (topic, key, value, headers) VALUES"
        """ (:t, 'sql', '\\x7b7d', '[["gone", null], ["event-id", "c3FsLTE="]]'),"""
        """ (:t, 'bare', '\\x7b7d', '[]')""",
        t=topic,
    )

    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr

    by_key = {r.key: r for r in read_committed(relay_env.bootstrap_servers, topic)}
    assert set(by_key) == {b"api", b"many", b"sql", b"bare"}
    api = by_key[b"api"].header_pairs
    assert api[3:] == (
        ("event-type", b"E"),
        ("event-id", str(returned).encode()),
        ("trace", b"t1"),
        ("gone", None),  # a null Kafka header, not b""
    )
    assert uuid.UUID(by_key[b"api"].headers["event-id"].decode()).version == 7
    assert by_key[b"many"].header_pairs[3:] == (("event-id", str(chosen).encode()),)
    assert by_key[b"sql"].header_pairs[3:] == (("gone", None), ("event-id", b"sql-1"))
    assert len(by_key[b"bare"].header_pairs) == 3  # outbox-id, -seq, -partition: no event-id
    assert relay_env.sql("SELECT count(*) FROM outbox_dead_letters") == [(0,)]
