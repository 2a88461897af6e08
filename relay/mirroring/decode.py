"""From a raw Kafka record to row operations or a dead-letter reason. Pure functions.

A record either maps completely (one operation per mapped table that takes it) or not at
all: if it fails for any of its tables, the whole record is dead-lettered, so a record
is never half applied.

:class:`TopicDecoder` decodes a topic's records with each table's row builder compiled
once (:mod:`relay.mirroring.row_builder`); :func:`decode_plain` is the definition, column
by column, that it is checked against and that decodes tombstones and heartbeats.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from relay.errors import DecodeError
from relay.mirroring.conversions import from_json, from_text
from relay.mirroring.ports import ValueDecoder
from relay.mirroring.row_builder import compile_row
from relay.mirroring.rows import MISSING, key_columns, operation
from relay.mirroring.types import Append, Decoded, KafkaRecord, Op, ResolvedTable, Upsert
from relay.mirroring.values import json_object, parse_value, unmapped_fields
from relay.runtime.heartbeat import HEARTBEAT_HEADER, decode_heartbeat

__all__ = ["TopicDecoder", "decode", "decode_plain", "from_json", "from_text"]

EVENT_TYPE_HEADER = "event-type"


def decode(
    record: KafkaRecord, tables: Sequence[ResolvedTable], decoder: ValueDecoder | None = None
) -> Decoded:
    """The record's operations on every table that takes it (see the module doc).
    ``decoder``: the schema registry of the tables whose ``format`` is not JSON
    (:mod:`relay.mirroring.values`); fields of such a value that no column reads are
    reported in ``Decoded.unmapped``, the rest of the row applied.

    A table with an ``event_types`` filter takes the records whose ``event-type`` header
    it lists. A tombstone without that header deletes (closes) the key in every table of
    its topic whose key mapping accepts the key; one whose event type a table does not
    list is skipped there and reported (``Decoded.skipped_tombstone``), never silently.
    Compiles the tables' row builders for this one record: use :class:`TopicDecoder` for
    many."""
    return TopicDecoder(tables, decoder).decode(record)


class TopicDecoder:
    """:func:`decode` for the records of one topic, its tables' row builders compiled
    once. ``decode`` is the same function for every record: for a topic of one JSON table
    without an event type filter (the usual mapping), one that does only what such a
    table needs."""

    def __init__(self, tables: Sequence[ResolvedTable], decoder: ValueDecoder | None = None):
        self._tables = tuple(tables)
        self._decoder = decoder
        self._filtered = any(t.mapping.event_types is not None for t in self._tables)
        self._steps = tuple(
            (
                t.table,
                t.mapping,
                compile_row(t),
                Append if t.mapping.history.mode == "changelog" else Upsert,
            )
            for t in self._tables
        )
        self.decode: Callable[[KafkaRecord], Decoded] = self._decode_many
        if len(self._steps) == 1 and not self._filtered:
            self._name, mapping, self._build, self._kind = self._steps[0]
            if mapping.value_format == "json":
                self.decode = self._decode_one

    def _decode_one(self, record: KafkaRecord) -> Decoded:
        """What :meth:`_decode_many` does for the one JSON table, without an event type."""
        raw = record.value
        if raw is None:
            return decode_plain(record, self._tables, self._decoder)
        headers = dict(record.headers)  # a header given twice: its last value
        if HEARTBEAT_HEADER in headers:
            return Decoded(record, heartbeat=decode_heartbeat(raw))  # as decode_plain does
        try:
            row = self._build(record, headers, json_object(raw, "value"))
        except DecodeError as exc:
            return Decoded(record, error=f"{self._name}: {exc}")
        return Decoded(record, (self._kind(self._name, row),))

    def _decode_many(self, record: KafkaRecord) -> Decoded:
        raw = record.value
        if raw is None:
            return decode_plain(record, self._tables, self._decoder)
        headers = dict(record.headers)
        if HEARTBEAT_HEADER in headers:
            return Decoded(record, heartbeat=decode_heartbeat(raw))
        event_type = None
        if self._filtered:
            raw_type = headers.get(EVENT_TYPE_HEADER)
            event_type = None if raw_type is None else raw_type.decode("utf-8", "replace")
        ops: list[Op] = []
        errors: list[str] = []
        unmapped: list[tuple[str, str, str]] = []
        value: object = MISSING
        for name, mapping, build, kind in self._steps:
            listed = mapping.event_types
            if listed is not None and event_type not in listed:
                continue
            try:
                if value is MISSING:
                    value = parse_value(raw, record.topic, mapping.value_format, self._decoder)
                ops.append(kind(name, build(record, headers, value)))
                if mapping.value_format != "json":  # JSON values are free-form
                    unmapped += unmapped_fields(value, mapping)
            except DecodeError as exc:
                errors.append(f"{name}: {exc}")
        if errors:
            return Decoded(record, error="; ".join(errors))
        return Decoded(record, tuple(ops), unmapped=tuple(unmapped))


def decode_plain(
    record: KafkaRecord, tables: Sequence[ResolvedTable], decoder: ValueDecoder | None = None
) -> Decoded:
    """What :func:`decode` gives, column by column (:func:`relay.mirroring.rows.operation`):
    the definition the compiled row builders are checked against, and how tombstones and
    heartbeats are decoded."""
    headers = dict(record.headers)  # a header given twice: its last value, as header()
    if HEARTBEAT_HEADER in headers:
        # The outbox relay's, for no table; never dead-lettered (skipped when malformed).
        return Decoded(record, heartbeat=decode_heartbeat(record.value))
    ops: list[Op] = []
    errors: list[str] = []
    skipped: list[str] = []
    unmapped: list[tuple[str, str, str]] = []
    value: object = MISSING
    tombstone = record.value is None
    raw_type = headers.get(EVENT_TYPE_HEADER)
    event_type = None if raw_type is None else raw_type.decode("utf-8", "replace")
    for table in tables:
        listed = table.mapping.event_types
        key: dict[str, object] | None = None
        if listed is not None and event_type not in listed:
            if not tombstone:
                continue
            if event_type is not None:
                skipped.append(f"event type {event_type!r} is not listed for {table.table}")
                continue
            try:  # no event type: a delete for every table whose key mapping accepts it
                key = key_columns(record, table)
            except DecodeError as exc:
                skipped.append(f"{table.table}: {exc}")
                continue
        try:
            if record.value is not None and value is MISSING:
                value = parse_value(record.value, record.topic, table.mapping.value_format, decoder)
            ops.append(operation(record, headers, table, value, key))
            if table.mapping.value_format != "json":  # JSON values are free-form
                unmapped += unmapped_fields(value, table.mapping)
        except DecodeError as exc:
            errors.append(f"{table.table}: {exc}")
    if errors:
        return Decoded(record, error="; ".join(errors))
    reason = "; ".join(skipped) or None
    return Decoded(record, tuple(ops), skipped_tombstone=reason, unmapped=tuple(unmapped))
