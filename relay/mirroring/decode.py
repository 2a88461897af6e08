"""From a raw Kafka record to row operations or a dead-letter reason. Pure functions.

A record either maps completely (one operation per mapped table that takes it) or not at
all: if it fails for any of its tables, the whole record is dead-lettered, so a record
is never half applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from relay.errors import DecodeError
from relay.mirroring.conversions import INTEGER_TEXT, from_json, from_text, json_type, short
from relay.mirroring.ports import ValueDecoder
from relay.mirroring.types import (
    Append,
    ColumnKind,
    Decoded,
    Delete,
    KafkaRecord,
    Op,
    ResolvedTable,
    Upsert,
)
from relay.mirroring.values import json_object, parse_value, unmapped_fields
from relay.runtime.heartbeat import HEARTBEAT_HEADER, decode_heartbeat

EVENT_TYPE_HEADER = "event-type"
_MISSING = object()


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
    list is skipped there and reported (``Decoded.skipped_tombstone``), never silently."""
    headers = dict(record.headers)  # a header given twice: its last value, as header()
    if HEARTBEAT_HEADER in headers:
        # The outbox relay's, for no table; never dead-lettered (skipped when malformed).
        return Decoded(record, heartbeat=decode_heartbeat(record.value))
    ops: list[Op] = []
    errors: list[str] = []
    skipped: list[str] = []
    unmapped: list[tuple[str, str, str]] = []
    value: object = _MISSING
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
                key = _key_columns(record, table)
            except DecodeError as exc:
                skipped.append(f"{table.table}: {exc}")
                continue
        try:
            if record.value is not None and value is _MISSING:
                value = parse_value(record.value, record.topic, table.mapping.value_format, decoder)
            ops.append(_operation(record, headers, table, value, key))
            if table.mapping.value_format != "json":  # JSON values are free-form
                unmapped += unmapped_fields(value, table.mapping)
        except DecodeError as exc:
            errors.append(f"{table.table}: {exc}")
    if errors:
        return Decoded(record, error="; ".join(errors))
    reason = "; ".join(skipped) or None
    return Decoded(record, tuple(ops), skipped_tombstone=reason, unmapped=tuple(unmapped))


def _operation(
    record: KafkaRecord,
    headers: Mapping[str, bytes | None],
    table: ResolvedTable,
    value: object,
    key: dict[str, object] | None,
) -> Op:
    mapping = table.mapping
    if key is None:
        key = _key_columns(record, table)
    mode = mapping.history.mode
    if mode == "scd2" and record.timestamp_ms is None:
        raise DecodeError("record has no Kafka timestamp (history scd2 needs it)")
    if record.value is None:
        version = (
            None if mapping.version.kind == "field" else _version(record, headers, table, None)
        )
        if mode == "changelog":
            row = {**key, **dict.fromkeys(c for c, _ in mapping.columns)}
            return Append(mapping.table, _history_row(record, table, row, version, "delete"))
        return Delete(mapping.table, key, version, record.timestamp if mode == "scd2" else None)
    if not isinstance(value, dict):  # parsed by the caller
        raise DecodeError("value is not a JSON object")
    row = dict(key)
    kinds = table.kinds
    for column, path in mapping.columns:
        found = value.get(path, _MISSING) if "." not in path else _field(value, path)
        if found is _MISSING:
            raise DecodeError(f"missing field {path!r} (column {column})")
        kind = kinds.get(column, ColumnKind.OTHER)
        held = type(found)  # exactly these types are what from_json gives back as they are
        if (
            found is None
            or (held is str and kind is ColumnKind.TEXT)
            or (held is int and kind is ColumnKind.INTEGER)
            or (held is bool and kind is ColumnKind.BOOLEAN)
        ):
            row[column] = found
        else:
            row[column] = from_json(kind, found, f"field {path!r}")
    row = _history_row(record, table, row, _version(record, headers, table, value), "upsert")
    if mode == "changelog":
        return Append(mapping.table, row)
    return Upsert(mapping.table, row)


def _history_row(
    record: KafkaRecord, table: ResolvedTable, row: dict[str, object], version: int | None, op: str
) -> dict[str, object]:
    """``row`` with its version, its history mode's columns the record fills (the store
    fills valid_to, is_current and applied_at) and its metadata columns."""
    mapping = table.mapping
    row[mapping.version.column] = version
    history = mapping.history
    if history.mode == "scd2":
        row[history.valid_from] = _moment(record.timestamp, table.kind(history.valid_from))
    elif history.mode == "changelog":
        row[history.op] = op
    for column, what in mapping.metadata:
        if what == "kafka_timestamp":
            row[column] = _moment(record.timestamp, table.kind(column))
        elif what == "topic":
            row[column] = record.topic
        elif what == "partition":
            row[column] = record.partition
        elif what == "offset":
            row[column] = record.offset
    return row


def _moment(timestamp: datetime | None, kind: ColumnKind) -> datetime | None:
    """A UTC timestamp for a timestamptz column, or as naive UTC for a timestamp one."""
    if timestamp is None or kind is not ColumnKind.TIMESTAMP:
        return timestamp
    return timestamp.astimezone(UTC).replace(tzinfo=None)


def _key_columns(record: KafkaRecord, table: ResolvedTable) -> dict[str, object]:
    key_mapping = table.mapping.key
    if record.key is None:
        raise DecodeError("record has no key")
    column = key_mapping.column
    kind = ColumnKind.OTHER if column is None else table.kinds.get(column, ColumnKind.OTHER)
    if column is not None and kind is ColumnKind.BYTES:
        return {column: record.key}
    if key_mapping.fields:
        return _json_key(record.key, table)
    try:
        text = record.key.decode("utf-8")
    except UnicodeDecodeError:
        raise DecodeError("key is not UTF-8 text") from None
    if column is not None:
        return {column: text if kind is ColumnKind.TEXT else from_text(kind, text, "key")}
    return _pattern_key(text, table)


def _json_key(raw: bytes, table: ResolvedTable) -> dict[str, object]:
    parsed = json_object(raw, "key")
    result: dict[str, object] = {}
    for column, path in table.mapping.key.fields:
        found = _field(parsed, path)
        if found is _MISSING:
            raise DecodeError(f"key has no field {path!r} (column {column})")
        if found is None:
            raise DecodeError(f"key field {path!r} is null")
        result[column] = from_json(table.kind(column), found, f"key field {path!r}")
    return result


def _pattern_key(text: str, table: ResolvedTable) -> dict[str, object]:
    pattern = table.mapping.key.pattern
    if pattern is None:  # parse_mapping guarantees one of the three forms
        raise DecodeError("no key mapping")
    match = pattern.fullmatch(text)
    if match is None:
        raise DecodeError(f"key {short(text)!r} does not match {pattern.pattern!r}")
    columns: dict[str, object] = {}
    for column, part in match.groupdict().items():
        if part is None:
            raise DecodeError(f"key {short(text)!r} has no part for column {column}")
        columns[column] = from_text(table.kind(column), part, f"key part {column}")
    return columns


def _version(
    record: KafkaRecord, headers: Mapping[str, bytes | None], table: ResolvedTable, value: object
) -> int:
    version = table.mapping.version
    if version.kind == "offset":
        return record.offset
    name = version.name or ""
    if version.kind == "header":
        raw = headers.get(name)
        if raw is None:
            raise DecodeError(f"version header {name!r} is missing")
        if raw.isdigit():  # ASCII digits only: the usual header, as the pattern reads it
            return int(raw)
        text = raw.decode("ascii", "replace").strip()
        if not INTEGER_TEXT.match(text):
            raise DecodeError(f"version header {name!r} is not an integer: {short(text)!r}")
        return int(text)
    found = _field(value, name) if isinstance(value, dict) else _MISSING
    if found is _MISSING or found is None:
        raise DecodeError(f"missing version field {name!r}")
    if isinstance(found, bool) or not isinstance(found, int):
        raise DecodeError(f"version field {name!r} is {json_type(found)}, not an integer")
    return found


def _field(document: dict[str, object], path: str) -> object:
    if "." not in path:
        return document.get(path, _MISSING)
    current: object = document
    for part in path.split("."):
        if not isinstance(current, dict) or part not in current:
            return _MISSING
        current = current[part]
    return current
