"""The headers the relay gives every Kafka record."""

from __future__ import annotations

from relay.kafka.publisher import batch_headers_bound, record_headers
from relay.kafka.topics import headers_bound
from relay.publishing.types import OutboxRecord


def test_the_relays_headers_come_first_then_the_events_own() -> None:
    record = OutboxRecord(12, 3, 45, "t", b"k", b"v", "Créé", (("trace", b"t"), ("x", b"")))
    assert record_headers(record) == [
        ("outbox-id", b"12"),
        ("outbox-seq", b"45"),
        ("outbox-partition", b"3"),
        ("event-type", "Créé".encode()),
        ("trace", b"t"),
        ("x", b""),
    ]
    bare = OutboxRecord(2**63 - 1, 0, 1, "t", None, None, None, ())
    assert record_headers(bare) == [
        ("outbox-id", b"9223372036854775807"),
        ("outbox-seq", b"1"),
        ("outbox-partition", b"0"),
    ]


def test_the_batch_headers_bound_of_an_empty_batch_and_of_negative_numbers() -> None:
    assert batch_headers_bound([]) > 0
    record = OutboxRecord(-(10**20), -1, -(10**30), "t", None, None, "E", ())
    assert batch_headers_bound([record]) >= headers_bound(record_headers(record))
