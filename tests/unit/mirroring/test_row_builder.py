"""The compiled row builders build exactly what the column-by-column definition builds.

Every record here goes through both :func:`relay.mirroring.rows.operation` (the
definition, as the mirror applied rows before the builders) and the table's compiled
builder, or through both :class:`TopicDecoder` and :func:`decode_plain`; the results must
be the same: the same operation, the same columns in the same order, each value of the
same type and ``repr``, or the same reason to dead-letter the record.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime

import pytest

from relay.errors import DecodeError
from relay.mirroring.decode import TopicDecoder, decode_plain
from relay.mirroring.row_builder import RowBuilder, compile_row, row_source
from relay.mirroring.rows import operation
from relay.mirroring.types import (
    Append,
    ColumnKind,
    Decoded,
    KafkaRecord,
    ResolvedTable,
    Upsert,
)
from relay.runtime.heartbeat import HEARTBEAT_HEADER, Heartbeat
from tests.unit.mirroring.test_decode import ANY_EVENT, ORDERS, table

K = ColumnKind
MOMENT_MS = int(datetime(2026, 3, 1, 12, 0, 30, 250_000, tzinfo=UTC).timestamp() * 1000)

# Values of every JSON type, and strings of every form a kind reads.
VALUES: list[object] = [
    None,
    True,
    False,
    0,
    -7,
    2**70,
    1.0,
    12.5,
    -0.0,
    1e300,
    "",
    "text",
    "12",
    "-3",
    "1.25",
    "NaN",
    "true",
    "2026-03-01T12:00:00",
    "2026-03-01T12:00:00+02:00",
    "2026-03-01",
    "not a date",
    "0b4e8a35-8d3f-4b0e-9c55-5a7d0e0f3a11",
    "aGVsbG8=",
    "not base64!",
    [],
    [1, "a", None, [2.5]],
    [{"nested": 1}],
    {},
    {"a": {"b": [1, 2]}},
]


def record(
    key: bytes | None,
    value: object,
    *headers: tuple[str, bytes | None],
    offset: int = 7,
    timestamp_ms: int | None = MOMENT_MS,
) -> KafkaRecord:
    raw = value if isinstance(value, bytes) or value is None else json.dumps(value).encode()
    return KafkaRecord("topic", 3, offset, key, raw, headers, timestamp_ms)


def exact(found: object) -> object:
    """What must be equal: the kind of operation, its table, and each column in order
    with its value's type and repr (so 1 is not 1.0, nor Decimal('1'), and NaN is NaN)."""
    if isinstance(found, Upsert | Append):
        return (type(found).__name__, found.table, _items(found.row))
    if isinstance(found, Decoded):
        return (
            found.record,
            tuple(exact(op) for op in found.ops),
            found.error,
            found.skipped_tombstone,
            found.heartbeat,
            found.unmapped,
        )
    return (type(found).__name__, repr(found))


def _items(row: object) -> list[tuple[str, str, str]]:
    assert isinstance(row, dict)
    return [(column, type(value).__name__, repr(value)) for column, value in row.items()]


def by_definition(rec: KafkaRecord, resolved: ResolvedTable, value: object) -> object:
    try:
        return exact(operation(rec, dict(rec.headers), resolved, value, None))
    except DecodeError as exc:
        return ("DecodeError", str(exc))


def compiled(rec: KafkaRecord, resolved: ResolvedTable, value: object) -> object:
    kind = Append if resolved.mapping.history.mode == "changelog" else Upsert
    try:
        row = _builder(resolved)(rec, dict(rec.headers), value)
        return exact(kind(resolved.table, row))
    except DecodeError as exc:
        return ("DecodeError", str(exc))


_BUILDERS: dict[int, tuple[ResolvedTable, RowBuilder]] = {}


def _builder(resolved: ResolvedTable) -> RowBuilder:
    """The table's builder, compiled once per table of this module."""
    if id(resolved) not in _BUILDERS:
        _BUILDERS[id(resolved)] = (resolved, compile_row(resolved))
    return _BUILDERS[id(resolved)][1]


def same(rec: KafkaRecord, resolved: ResolvedTable, value: object) -> None:
    assert compiled(rec, resolved, value) == by_definition(rec, resolved, value), (
        rec,
        value,
        row_source(resolved),
    )


SEQ = ("outbox-seq", b"42")
COLUMN_KINDS = [k for k in ColumnKind]


@pytest.mark.parametrize("kind", COLUMN_KINDS, ids=lambda k: k.value)
def test_each_column_kind_reads_each_json_value_as_the_definition_does(kind: ColumnKind) -> None:
    resolved = table(
        {
            "key": {"column": "id"},
            "version": {"column": "seq"},
            "columns": {"c": "f", "deep": "n.f"},
        },
        {"id": K.TEXT, "c": kind, "deep": kind, "seq": K.INTEGER},
    )
    for found in VALUES:
        value = {"f": found, "n": {"f": found}}
        same(record(b"k", value, SEQ), resolved, value)
    for value in ({}, {"f": 1}, {"f": 1, "n": 5}, {"f": 1, "n": {}}, {"f": 1, "n": None}):
        same(record(b"k", value, SEQ), resolved, value)  # missing fields, plain and nested
    for value in ([1], "text", 5, None):  # not an object (a registry's decoder may give any)
        same(record(b"k", b"x", SEQ), resolved, value)


KEYS: list[bytes | None] = [
    None,
    b"",
    b"12",
    b"-3",
    b"x1",
    b"true",
    b"\xff\xfe",
    b"0b4e8a35-8d3f-4b0e-9c55-5a7d0e0f3a11",
    b"2026-03-01",
    b"order-12",
    b'{"r": "eu", "n": 4}',
    b'{"r": "eu"}',
    b'{"r": null, "n": 4}',
    b"[1]",
]


@pytest.mark.parametrize(
    "key_mapping",
    [
        *({"column": "id", "kind": kind} for kind in COLUMN_KINDS),
        {"pattern": r"order-(?P<id>[0-9]+)", "kind": K.INTEGER},
        {"pattern": r"(?P<id>[a-z]+)(?P<n>[0-9]*)", "kind": K.TEXT},
        {"fields": {"id": "r", "n": "n"}, "kind": K.TEXT},
    ],
    ids=lambda m: f"{next(iter(m))}-{m['kind'].value}",
)
def test_each_key_form_reads_each_key_as_the_definition_does(
    key_mapping: dict[str, object],
) -> None:
    form = {k: v for k, v in key_mapping.items() if k != "kind"}
    kind = key_mapping["kind"]
    assert isinstance(kind, ColumnKind)
    resolved = table(
        {"key": form, "version": {"column": "seq"}, "columns": {"c": "c"}},
        {"id": kind, "n": K.INTEGER, "c": K.INTEGER, "seq": K.INTEGER},
    )
    value = {"c": 1}
    for key in KEYS:
        same(record(key, value, SEQ), resolved, value)


VERSION_HEADERS: list[tuple[str, bytes | None]] = [
    SEQ,
    ("outbox-seq", b" 42 "),
    ("outbox-seq", b"-5"),
    ("outbox-seq", b"x1"),
    ("outbox-seq", b"\xd9\xa3"),  # not ASCII digits
    ("outbox-seq", b""),
    ("outbox-seq", None),
    ("other", b"1"),
]


@pytest.mark.parametrize("source", ["header:outbox-seq", "offset", "field:rev", "field:meta.rev"])
def test_each_version_source_reads_as_the_definition_does(source: str) -> None:
    resolved = table(
        {"key": {"column": "id"}, "version": {"column": "seq", "source": source}},
        {"id": K.TEXT, "seq": K.INTEGER},
    )
    for header, rev in itertools.product(VERSION_HEADERS, [None, 9, True, "9", 9.0, {}]):
        for value in ({"rev": rev, "meta": {"rev": rev}}, {}):
            same(record(b"k", value, header, offset=11), resolved, value)


METADATA = {
    "ts": "kafka_timestamp",
    "tz": "kafka_timestamp",
    "tp": "topic",
    "pn": "partition",
    "off": "offset",
    "at": "applied_at",
}
META_KINDS = {"ts": K.TIMESTAMP, "tz": K.TIMESTAMPTZ, "tp": K.TEXT, "pn": K.INTEGER}


@pytest.mark.parametrize("mode", ["current", "scd2", "changelog"])
@pytest.mark.parametrize("valid_from", [K.TIMESTAMPTZ, K.TIMESTAMP])
def test_history_modes_and_metadata_as_the_definition_does(
    mode: str, valid_from: ColumnKind
) -> None:
    resolved = table(
        {
            "key": {"column": "id"},
            "version": {"column": "seq"},
            "columns": {"c": "c", "d": "d"},
            "history": mode,
            "history_columns": {"current": {}, "scd2": {"valid_from": "since"}}.get(
                mode, {"op": "kind"}
            ),
            "metadata": METADATA,
        },
        {"id": K.INTEGER, "c": K.NUMERIC, "d": K.TEXT, "seq": K.INTEGER, "since": valid_from}
        | META_KINDS,
    )
    for timestamp_ms in (MOMENT_MS, None, 0):
        for value in ({"c": 1.5, "d": "x"}, {"c": "bad"}, {"d": "x"}):
            rec = record(b"5", value, SEQ, timestamp_ms=timestamp_ms)
            same(rec, resolved, value)
            same(record(b"five", value, SEQ, timestamp_ms=timestamp_ms), resolved, value)


LOG = table(
    {
        "table": "s.log",
        "key": {"column": "id"},
        "version": {"column": "seq", "source": "offset"},
        "columns": {"total": "total"},
        "history": "changelog",
    },
    {"id": K.TEXT, "total": K.FLOAT, "seq": K.INTEGER},
)
ORDER = {"customer": "ada", "address": {"city": "Paris"}, "total": 12.5}
BEAT = Heartbeat("db", 1, 4, 1_000)
RECORDS = [
    record(b"order-3", ORDER, ("event-type", b"OrderPlaced"), SEQ),
    record(b"order-3", ORDER, ("event-type", b"Viewed"), SEQ),
    record(b"order-3", ORDER, SEQ),
    record(b"order-3", ORDER, ("event-type", b"OrderPlaced"), ("event-type", b"Viewed"), SEQ),
    record(b"order-x", ORDER, ("event-type", b"OrderPlaced"), SEQ),
    record(b"order-3", ORDER | {"total": "12.50"}, ("event-type", b"OrderPlaced"), SEQ),
    record(b"order-3", ORDER | {"total": True}, ("event-type", b"OrderPlaced"), SEQ),
    record(b"order-3", {"customer": "ada"}, ("event-type", b"OrderPlaced"), SEQ),
    record(b"order-3", b"{", ("event-type", b"OrderPlaced"), SEQ),
    record(b"order-3", b"[1]", ("event-type", b"OrderPlaced"), SEQ),
    record(b"order-3", b"\xff", SEQ),
    record(b"order-3", b'{"total": 1} x', SEQ),
    record(b"order-3", ORDER, ("event-type", b"OrderPlaced")),  # no version header
    record(None, ORDER, ("event-type", b"OrderPlaced"), SEQ),
    record(b"order-3", None, ("event-type", b"OrderPlaced"), SEQ),  # tombstones
    record(b"order-3", None, ("event-type", b"Viewed"), SEQ),
    record(b"order-3", None, SEQ),
    record(b"customer-3", None, SEQ),
    record(None, None, SEQ),
    record(BEAT.key, BEAT.encode(), (HEARTBEAT_HEADER, b"1")),
    record(BEAT.key, b"{", (HEARTBEAT_HEADER, b"1")),
    record(BEAT.key, None, (HEARTBEAT_HEADER, b"1")),
    record(b"order-3", ORDER, ("event-type", None), SEQ),
]


@pytest.mark.parametrize(
    "tables",
    [[ORDERS], [ANY_EVENT], [LOG], [ORDERS, ANY_EVENT, LOG], [ANY_EVENT, ORDERS], []],
    ids=["filtered", "any", "changelog", "three", "two", "none"],
)
def test_a_topic_decoder_decodes_each_record_as_the_definition_does(
    tables: list[ResolvedTable],
) -> None:
    decoder = TopicDecoder(tables)
    for rec in RECORDS:
        assert exact(decoder.decode(rec)) == exact(decode_plain(rec, tables)), rec


def test_the_generated_source_holds_no_text_of_the_mapping() -> None:
    hostile = "x'); import os; ('"
    resolved = table(
        {
            "key": {"column": "id"},
            "version": {"column": "seq", "source": f"header:{hostile}"},
            "columns": {"c": f"{hostile}c", "d": f"{hostile}.y"},
        },
        {"id": K.TEXT, "c": K.TEXT, "d": K.INTEGER, "seq": K.INTEGER},
    )
    source = row_source(resolved)
    assert "import" not in source and "x'" not in source
    value = {f"{hostile}c": "v", hostile: {"y": 3}}
    rec = record(b"k", value, (hostile, b"4"))
    same(rec, resolved, value)
    assert compile_row(resolved)(rec, dict(rec.headers), value) == {
        "id": "k",
        "c": "v",
        "d": 3,
        "seq": 4,
    }
