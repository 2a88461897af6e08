"""CloudEvents binary mode on the topics that ask (relay.publishing.cloudevents): the
attributes each record gets, those an event brings itself, tombstones, rows that cannot be
CloudEvents (dead letters, through PartitionRelay), other topics untouched."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from relay.errors import ConfigurationError
from relay.publishing.cloudevents import CloudEvents, CloudEventsPublisher, rfc3339
from relay.publishing.partition_relay import PartitionRelay
from relay.publishing.types import Headers, OutboxRecord
from relay.runtime.retry import RetryPolicy
from relay.settings.relay import load_settings
from tests.fakes.publishing import OWNER, FakeClock, MemoryKafka, MemoryOutbox

EVENTS = CloudEvents(frozenset({"orders"}), "https://shop.example/orders")
EVENT_ID = b"0192f5e4-7b3c-7cc1-9a3e-3b0f1c2d4e5f"
COMMITTED_MS = 1_764_172_800_123  # 2025-11-26T16:00:00.123Z


def row(
    seq: int,
    topic: str = "orders",
    *,
    event_type: str | None = "OrderPlaced",
    value: bytes | None = b"{}",
    headers: Headers = (("event-id", EVENT_ID),),
    committed_ms: int = COMMITTED_MS,
) -> OutboxRecord:
    return OutboxRecord(
        seq,
        0,
        seq,
        topic,
        b"k%d" % seq,
        value,
        event_type,
        headers,
        committed_ms - 5,
        committed_ms=committed_ms,
    )


def test_a_record_gets_the_required_attributes_its_time_and_content_type() -> None:
    headers = EVENTS.headers(row(1))
    assert headers == (
        ("event-id", EVENT_ID),
        ("ce_specversion", b"1.0"),
        ("ce_id", EVENT_ID),
        ("ce_source", b"https://shop.example/orders"),
        ("ce_type", b"OrderPlaced"),
        ("ce_time", b"2025-11-26T16:00:00.123Z"),
        ("content-type", b"application/json"),
    )


def test_rfc3339_keeps_milliseconds_and_utc() -> None:
    assert rfc3339(0) == b"1970-01-01T00:00:00.000Z"
    moment = datetime.fromisoformat(rfc3339(COMMITTED_MS).decode())
    assert moment == datetime(2025, 11, 26, 16, 0, 0, 123000, tzinfo=UTC)


def test_attributes_the_event_brings_are_kept_once() -> None:
    own: Headers = (
        ("event-id", EVENT_ID),
        ("ce_subject", b"order/1"),
        ("ce_source", b"/mine"),
        ("content-type", b"application/avro"),
    )
    headers = EVENTS.headers(row(1, headers=own))
    assert headers is not None
    names = [name for name, _ in headers]
    assert len(names) == len(set(names))
    assert dict(headers)["ce_source"] == b"/mine"
    assert dict(headers)["content-type"] == b"application/avro"


def test_a_tombstone_has_no_content_type_and_an_unknown_commit_time_no_ce_time() -> None:
    headers = EVENTS.headers(row(1, value=None, committed_ms=0))
    assert headers is not None
    assert {name for name, _ in headers} == {
        "event-id",
        "ce_specversion",
        "ce_id",
        "ce_source",
        "ce_type",
    }


def test_a_schema_registry_value_is_not_said_to_be_json() -> None:
    """A value in the Confluent wire format (magic byte 0, schema id: what the write API's
    Avro, Protobuf and JSON Schema formats write) is not JSON: no content-type is claimed
    (the attribute is optional); one the event brings is kept."""
    avro = b"\x00\x00\x00\x00\x07\x02\x0aorder"
    headers = EVENTS.headers(row(1, value=avro))
    assert headers is not None
    assert "content-type" not in dict(headers)
    own: Headers = (("event-id", EVENT_ID), ("content-type", b"application/avro"))
    kept = EVENTS.headers(row(1, value=avro, headers=own))
    assert kept is not None
    assert dict(kept)["content-type"] == b"application/avro"
    bare = EVENTS.headers(row(1, value=avro, headers=(("ce_subject", b"order/1"),)))
    assert bare is not None
    assert "content-type" not in dict(bare)


def test_a_row_without_an_event_id_is_identified_by_its_outbox_id() -> None:
    headers = EVENTS.headers(row(7, headers=()))
    assert headers is not None
    assert dict(headers)["ce_id"] == b"outbox-7"


def test_rows_without_a_type_are_dead_letters_and_other_topics_are_untouched() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    plain = row(2, "payments", event_type=None)
    outbox.add(row(1), plain, row(3, event_type=None), row(4, headers=(("ce_type", b"T"),)))
    relay = PartitionRelay(
        0,
        outbox,
        CloudEventsPublisher(kafka.publisher(0), EVENTS),
        owner=OWNER,
        clock=FakeClock(),
        retry=RetryPolicy(initial_delay_s=1.0, max_attempts=2, jitter=0.0),
    )
    relay.drain()
    assert [r.seq for r in kafka.committed] == [1, 2, 4]
    assert kafka.committed[1] == plain  # not a CloudEvents topic: as it was
    assert dict(kafka.committed[2].headers)["ce_type"] == b"T"
    ((dead_id, reason),) = outbox.dead
    assert dead_id == 3 and "needs an event type" in reason


def test_the_settings_take_topics_and_a_uri_reference_source() -> None:
    settings = load_settings(
        environ={
            "RELAY_DATABASE_URL": "postgresql://u@h/db",
            "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
            "RELAY_CLOUDEVENTS_TOPICS": "orders, payments",
            "RELAY_CLOUDEVENTS_SOURCE": "urn:shop:orders",
        }
    )
    assert settings.cloudevents_topics == ("orders", "payments")
    assert settings.cloudevents_source == "urn:shop:orders"
    with pytest.raises(ConfigurationError, match="RELAY_CLOUDEVENTS_SOURCE"):
        load_settings(
            environ={
                "RELAY_DATABASE_URL": "postgresql://u@h/db",
                "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
                "RELAY_CLOUDEVENTS_SOURCE": "not a uri",
            }
        )


def test_a_published_record_is_the_row_with_its_headers_only() -> None:
    """Every other field of the record stays (the copy is made field by field)."""
    kafka = MemoryKafka()
    publisher = CloudEventsPublisher(kafka.publisher(0), EVENTS)
    publisher.fence()
    publisher.begin()
    original = replace(row(5), follows=3)
    publisher.send([original])
    publisher.commit(5)
    (sent,) = kafka.committed
    assert sent == replace(original, headers=EVENTS.headers(original))
