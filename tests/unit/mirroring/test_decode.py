"""Decoding records into row operations or dead-letter reasons (pure)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from relay.errors import DecodeError
from relay.mirroring.decode import decode, from_json, from_text
from relay.mirroring.mapping import parse_mapping
from relay.mirroring.types import Append, ColumnKind, Delete, KafkaRecord, ResolvedTable, Upsert
from relay.runtime.heartbeat import HEARTBEAT_HEADER, Heartbeat

K = ColumnKind


def table(mapping: dict[str, object], kinds: dict[str, ColumnKind]) -> ResolvedTable:
    base: dict[str, object] = {"table": "t", "topics": ["topic"]}
    return ResolvedTable(parse_mapping({"tables": [base | mapping]}).tables[0], kinds)


ORDERS = table(
    {
        "key": {"pattern": r"order-(?P<id>[0-9]+)"},
        "version": {"column": "seq"},
        "columns": {"customer": "customer", "city": "address.city", "total": "total"},
        "event_types": ["OrderPlaced"],
    },
    {"id": K.INTEGER, "customer": K.TEXT, "city": K.TEXT, "total": K.NUMERIC, "seq": K.INTEGER},
)


def rec(
    key: bytes | None, value: object, *headers: tuple[str, bytes], offset: int = 7
) -> KafkaRecord:
    raw = value if isinstance(value, bytes) or value is None else json.dumps(value).encode()
    return KafkaRecord("topic", 0, offset, key, raw, headers)


PLACED = ("event-type", b"OrderPlaced")
SEQ = ("outbox-seq", b"42")
ORDER = {"customer": "ada", "address": {"city": "Paris"}, "total": 12.5}


def test_upsert_from_pattern_key_nested_field_and_outbox_seq() -> None:
    decoded = decode(rec(b"order-3", ORDER, PLACED, SEQ), [ORDERS])
    assert decoded.error is None
    assert decoded.ops == (
        Upsert(
            "t", {"id": 3, "customer": "ada", "city": "Paris", "total": Decimal("12.5"), "seq": 42}
        ),
    )


def test_tombstone_deletes_with_its_version() -> None:
    decoded = decode(rec(b"order-3", None, PLACED, SEQ), [ORDERS])
    assert decoded.ops == (Delete("t", {"id": 3}, 42),)


def test_other_event_types_are_skipped() -> None:
    assert decode(rec(b"order-3", ORDER, ("event-type", b"Viewed"), SEQ), [ORDERS]).skipped
    assert decode(rec(b"order-3", ORDER, SEQ), [ORDERS]).skipped  # no event-type header


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (rec(None, ORDER, PLACED, SEQ), "record has no key"),
        (rec(b"order-x", ORDER, PLACED, SEQ), "key 'order-x' does not match"),
        (rec(b"order-3", b"{", PLACED, SEQ), "value is not JSON"),
        (rec(b"order-3", b"\xff", PLACED, SEQ), "value is not JSON"),
        (rec(b"order-3", [1], PLACED, SEQ), "value is JSON list, not an object"),
        (rec(b"order-3", {"customer": "ada"}, PLACED, SEQ), "missing field 'address.city'"),
        (
            rec(b"order-3", ORDER | {"customer": 5}, PLACED, SEQ),
            "field 'customer' is a number, column needs text",
        ),
        (
            rec(b"order-3", ORDER | {"total": True}, PLACED, SEQ),
            "field 'total' is a boolean, column needs numeric",
        ),
        (rec(b"order-3", ORDER, PLACED), "version header 'outbox-seq' is missing"),
        (rec(b"order-3", ORDER, PLACED, ("outbox-seq", b"x1")), "is not an integer: 'x1'"),
    ],
)
def test_unmappable_records_get_a_reason(record: KafkaRecord, reason: str) -> None:
    decoded = decode(record, [ORDERS])
    assert decoded.ops == ()
    assert decoded.error is not None and reason in decoded.error
    assert decoded.error.startswith("t: ")


def test_json_object_key_and_field_version() -> None:
    customers = table(
        {
            "key": {"fields": {"region": "r", "name": "n"}},
            "version": {"column": "v", "source": "field:rev"},
            "columns": {"tier": "tier"},
        },
        {"region": K.TEXT, "name": K.TEXT, "v": K.INTEGER, "tier": K.TEXT},
    )
    key = json.dumps({"r": "eu", "n": "ada"}).encode()
    assert decode(rec(key, {"tier": "gold", "rev": 9}), [customers]).ops == (
        Upsert("t", {"region": "eu", "name": "ada", "tier": "gold", "v": 9}),
    )
    # A tombstone has no field to take a version from: it deletes unconditionally.
    assert decode(rec(key, None), [customers]).ops == (
        Delete("t", {"region": "eu", "name": "ada"}, None),
    )
    assert "missing version field 'rev'" in str(decode(rec(key, {"tier": "x"}), [customers]).error)
    assert "key has no field 'n'" in str(decode(rec(b'{"r": "eu"}', {}), [customers]).error)


def test_offset_version_and_whole_key_column() -> None:
    items = table(
        {"key": {"column": "id"}, "version": {"column": "v", "source": "offset"}},
        {"id": K.UUID, "v": K.INTEGER},
    )
    key = uuid.UUID(int=5)
    assert decode(rec(str(key).encode(), {}, offset=123), [items]).ops == (
        Upsert("t", {"id": key, "v": 123}),
    )


def test_a_record_failing_for_one_table_is_dead_lettered_whole() -> None:
    plain = table(
        {"key": {"column": "id"}, "version": {"column": "v", "source": "offset"}},
        {"id": K.TEXT, "v": K.INTEGER},
    )
    decoded = decode(rec(b"order-3", {"customer": "ada"}, PLACED, SEQ), [plain, ORDERS])
    assert decoded.ops == ()
    assert "missing field 'address.city'" in str(decoded.error)


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        (K.INTEGER, 3, 3),
        (K.INTEGER, 3.0, 3),
        (K.FLOAT, 1, 1.0),
        (K.NUMERIC, 0.1, Decimal("0.1")),
        (K.NUMERIC, "12.50", Decimal("12.50")),
        (K.BOOLEAN, False, False),
        (K.JSON, {"a": [1]}, {"a": [1]}),
        (K.TEXT, None, None),
        (K.TIMESTAMPTZ, "2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (K.TIMESTAMPTZ, "2026-01-02T03:04:05", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (K.TIMESTAMP, "2026-01-02T04:04:05+01:00", datetime(2026, 1, 2, 3, 4, 5)),
        (K.DATE, "2026-01-02", date(2026, 1, 2)),
        (K.BYTES, "AAE=", b"\x00\x01"),
        (K.OTHER, [1, 2], [1, 2]),
        (K.OTHER, "label", "label"),
    ],
)
def test_json_values_are_converted_for_the_column(
    kind: ColumnKind, value: object, expected: object
) -> None:
    assert from_json(kind, value, "field") == expected


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (K.INTEGER, 3.5),
        (K.INTEGER, "3"),
        (K.INTEGER, True),
        (K.TEXT, 3),
        (K.BOOLEAN, "true"),
        (K.NUMERIC, "twelve"),
        (K.TIMESTAMPTZ, "yesterday"),
        (K.UUID, "not-a-uuid"),
        (K.DATE, 20260102),
        (K.OTHER, {"a": 1}),
        (K.OTHER, [[1], [{"a": 1}]]),
    ],
)
def test_wrong_types_are_decode_errors(kind: ColumnKind, value: object) -> None:
    with pytest.raises(DecodeError):
        from_json(kind, value, "field")


def test_key_text_conversions() -> None:
    assert from_text(K.INTEGER, "-12", "key") == -12
    assert from_text(K.BOOLEAN, "true", "key") is True
    assert from_text(K.TEXT, "x", "key") == "x"
    with pytest.raises(DecodeError, match="is not an integer"):
        from_text(K.INTEGER, "1e3", "key")


FILTERED = table(
    {
        "key": {"pattern": r"order-(?P<id>[0-9]+)"},
        "version": {"column": "seq"},
        "event_types": ["OrderPlaced"],
    },
    {"id": K.INTEGER, "seq": K.INTEGER},
)


def test_a_tombstone_without_event_type_deletes_in_every_table_whose_key_fits() -> None:
    decoded = decode(rec(b"order-3", None, SEQ), [FILTERED])
    assert decoded.ops == (Delete("t", {"id": 3}, 42),)
    assert decoded.skipped_tombstone is None
    other = decode(rec(b"customer-3", None, SEQ), [FILTERED])  # not this table's key
    assert other.ops == () and other.error is None
    assert other.skipped_tombstone == "t: key 'customer-3' does not match 'order-(?P<id>[0-9]+)'"


def test_a_tombstone_of_an_unlisted_event_type_is_skipped_and_said_so() -> None:
    decoded = decode(rec(b"order-3", None, ("event-type", b"Viewed"), SEQ), [FILTERED])
    assert decoded.skipped and decoded.ops == ()
    assert decoded.skipped_tombstone == "event type 'Viewed' is not listed for t"
    # A record with a value of another event type is skipped as before, nothing to say.
    assert decode(rec(b"order-3", ORDER, SEQ), [FILTERED]).skipped_tombstone is None


MOMENT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def timed(value: object, offset: int = 7) -> KafkaRecord:
    raw = None if value is None else json.dumps(value).encode()
    return KafkaRecord("topic", 2, offset, b"5", raw, (SEQ,), int(MOMENT.timestamp() * 1000))


def test_history_modes_and_metadata_columns() -> None:
    base = {"key": {"column": "id"}, "version": {"column": "seq"}, "columns": {"n": "n"}}
    meta = {"ts": "kafka_timestamp", "tp": "topic", "pn": "partition", "at": "applied_at"}
    kinds = {"id": K.INTEGER, "n": K.INTEGER, "seq": K.INTEGER, "ts": K.TIMESTAMP}
    scd2 = table(
        base | {"history": "scd2", "metadata": meta}, kinds | {"valid_from": K.TIMESTAMPTZ}
    )
    naive = MOMENT.replace(tzinfo=None)
    assert decode(timed({"n": 1}), [scd2]).ops == (
        Upsert(
            "t",
            {"id": 5, "n": 1, "seq": 42, "valid_from": MOMENT, "ts": naive, "tp": "topic", "pn": 2},
        ),
    )
    assert decode(timed(None), [scd2]).ops == (Delete("t", {"id": 5}, 42, MOMENT),)
    untimed = KafkaRecord("topic", 2, 7, b"5", b'{"n": 1}', (SEQ,))
    assert "has no Kafka timestamp" in str(decode(untimed, [scd2]).error)
    changelog = table(
        base
        | {"history": "changelog", "history_columns": {"op": "kind"}, "metadata": {"o": "offset"}},
        {"id": K.INTEGER, "n": K.INTEGER, "seq": K.INTEGER},
    )
    assert decode(timed({"n": 1}, 9), [changelog]).ops == (
        Append("t", {"id": 5, "n": 1, "seq": 42, "kind": "upsert", "o": 9}),
    )
    assert decode(timed(None, 10), [changelog]).ops == (
        Append("t", {"id": 5, "n": None, "seq": 42, "kind": "delete", "o": 10}),
    )


ANY_EVENT = table(
    {"key": {"column": "id"}, "version": {"column": "seq"}, "columns": {"total": "total"}},
    {"id": K.TEXT, "total": K.NUMERIC, "seq": K.INTEGER},
)


def test_a_heartbeat_is_read_never_applied_nor_dead_lettered() -> None:
    beat = Heartbeat("db", 1, 4, 1_000)
    decoded = decode(rec(beat.key, beat.encode(), (HEARTBEAT_HEADER, b"1")), [ORDERS, ANY_EVENT])
    assert (decoded.heartbeat, decoded.ops, decoded.error, decoded.skipped) == (
        beat,
        (),
        None,
        False,
    )
    malformed = decode(rec(beat.key, b"{", (HEARTBEAT_HEADER, b"1")), [ANY_EVENT])
    assert (malformed.heartbeat, malformed.ops, malformed.error) == (None, (), None)
