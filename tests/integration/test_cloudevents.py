"""CloudEvents 1.0 in binary content mode (Kafka protocol binding) on the topics of
``--cloudevents-topics``, on the real servers: each record's headers checked against the
spec's required attributes and their formats; ``ce_time`` is the commit time; a topic not
listed is published as before; a row that cannot be a CloudEvent is a dead letter."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay
from relay.devenv.reader import ReadRecord
from tests.integration.support import RelayTestEnv, read_committed, run_relay

# RFC 3339 date-time (section 5.6), as the spec's Timestamp type requires.
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
# RFC 3986 URI-reference: no spaces or control characters; a scheme, when there is one,
# is a letter then letters, digits, +, - or . (the spec's URI-reference type).
URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
REQUIRED = ("ce_specversion", "ce_id", "ce_source", "ce_type")


def check_cloudevent(record: ReadRecord) -> dict[str, str]:
    """The record's attributes, after checking them as the spec (spec.md, and the Kafka
    protocol binding's binary mode) requires; fails the test otherwise."""
    names = [name for name, _ in record.header_pairs]
    attributes = [n for n in names if n.startswith("ce_") or n == "content-type"]
    assert len(attributes) == len(set(attributes)), f"an attribute twice: {names}"
    values: dict[str, str] = {}
    for name, value in record.header_pairs:
        if name.startswith("ce_") or name == "content-type":
            assert value is not None and value != b"", f"{name} is empty"
            values[name] = value.decode("utf-8")  # header values MUST be UTF-8 strings
            assert re.fullmatch(r"ce_[a-z0-9]{1,20}|content-type", name), name
    for name in REQUIRED:
        assert name in values, f"required attribute {name} missing: {names}"
    assert values["ce_specversion"] == "1.0"
    source = values["ce_source"]
    assert not any(c.isspace() for c in source)
    scheme = urlsplit(source).scheme
    assert not scheme or URI_SCHEME.match(scheme)
    if "ce_time" in values:
        assert RFC3339.match(values["ce_time"]), values["ce_time"]
    if record.value is None:
        assert "content-type" not in values  # no data, no datacontenttype
    return values


def _by_key(records: list[ReadRecord]) -> Mapping[bytes | None, ReadRecord]:
    return {record.key: record for record in records}


def test_records_of_cloudevents_topics_are_cloudevents(
    relay_env: RelayTestEnv, make_topic: Callable[..., str]
) -> None:
    events, plain = make_topic(), make_topic()
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    with engine.begin() as conn:
        placed = relay.publish(conn, events, "o-1", {"id": 1}, event_type="OrderPlaced")
        relay.publish(
            conn,
            events,
            "o-2",
            {"id": 2},
            {"ce_subject": "order/2", "content-type": "application/vnd.shop+json"},
            event_type="OrderShipped",
        )
        relay.publish(conn, events, "o-3", None, event_type="OrderDeleted")  # a tombstone
        relay.publish(conn, plain, "p-1", {"id": 1}, event_type="OrderPlaced")
        # The commit comes a while after the rows were written: ce_time is the commit.
        conn.execute(sa.text("SELECT pg_sleep(0.5)"))
        before_commit = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
    engine.dispose()
    after_commit = datetime.now().astimezone()

    result = run_relay(
        relay_env,
        "run",
        "--once",
        RELAY_CLOUDEVENTS_TOPICS=events,
        RELAY_CLOUDEVENTS_SOURCE="https://shop.example/orders",
    )
    assert result.returncode == 0, result.stderr

    records = _by_key(read_committed(relay_env.bootstrap_servers, events))
    assert set(records) == {b"o-1", b"o-2", b"o-3"}
    for record in records.values():
        check_cloudevent(record)

    first = check_cloudevent(records[b"o-1"])
    assert first["ce_id"] == str(placed)
    assert uuid.UUID(first["ce_id"]).version == 7
    assert first["ce_source"] == "https://shop.example/orders"
    assert first["ce_type"] == "OrderPlaced"
    assert first["content-type"] == "application/json"
    committed = datetime.fromisoformat(first["ce_time"])
    created_ms = records[b"o-1"].timestamp[1]  # the Kafka timestamp: the row's created_at
    assert committed.timestamp() * 1000 >= created_ms + 500
    # ce_time keeps milliseconds: the commit began at or after before_commit, to the ms.
    assert before_commit.replace(microsecond=before_commit.microsecond // 1000 * 1000) <= committed
    # ... and ended before after_commit, to the ms: the cast to milliseconds rounds, so
    # ce_time may read up to 0.5 ms after the commit.
    assert committed <= after_commit + timedelta(microseconds=500)

    second = check_cloudevent(records[b"o-2"])
    assert second["ce_subject"] == "order/2"  # the event's own attributes stay
    assert second["content-type"] == "application/vnd.shop+json"
    assert second["ce_type"] == "OrderShipped"
    assert second["ce_time"] == first["ce_time"]  # one transaction, one commit

    third = check_cloudevent(records[b"o-3"])
    assert records[b"o-3"].value is None
    assert third["ce_type"] == "OrderDeleted"

    (other,) = read_committed(relay_env.bootstrap_servers, plain)
    assert [name for name, _ in other.header_pairs] == [
        "outbox-id",
        "outbox-seq",
        "outbox-partition",
        "event-type",
        "event-id",
    ]


def test_the_default_source_names_the_database_and_rows_without_a_type_are_dead_letters(
    relay_env: RelayTestEnv, topic: str
) -> None:
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    with engine.begin() as conn:
        relay.publish(conn, topic, "typed", {"n": 1}, event_type="Typed")
        relay.publish(conn, topic, "untyped", {"n": 2})
    engine.dispose()
    # A plain-SQL row without an event id: its ce_id is its outbox id.
    relay_env.sql(
        "INSERT INTO outbox (topic, key, value, event_type, headers)"
        " VALUES (:t, 'sql', '\\x7b7d', 'Sql', '[]')",
        t=topic,
    )

    result = run_relay(relay_env, "run", "--once", RELAY_CLOUDEVENTS_TOPICS=topic)
    assert result.returncode == 0, result.stderr

    records = _by_key(read_committed(relay_env.bootstrap_servers, topic))
    assert set(records) == {b"typed", b"sql"}
    url = urlsplit(relay_env.database_url)
    typed = check_cloudevent(records[b"typed"])
    assert typed["ce_source"] == f"postgresql://{url.hostname}:{url.port}{url.path}"
    assert (url.password or "\x00") not in typed["ce_source"]
    sql = check_cloudevent(records[b"sql"])
    assert sql["ce_id"] == f"outbox-{records[b'sql'].outbox_id}"
    dead = relay_env.sql("SELECT key, error FROM outbox_dead_letters")
    assert [(bytes(key), "needs an event type" in error) for key, error in dead] == [
        (b"untyped", True)
    ]
