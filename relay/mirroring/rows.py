"""A record's row operation for one table, column by column: the definition.

:mod:`relay.mirroring.decode` takes tombstones through :func:`operation`; the rows of
other records are built by :mod:`relay.mirroring.row_builder`'s compiled builders, which
call the helpers here for the rarer forms and are checked to build what
:func:`operation` builds (tests/unit/mirroring/test_row_builder.py). Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from relay.errors import DecodeError
from relay.mirroring.conversions import INTEGER_TEXT, from_json, from_text, json_type, short
from relay.mirroring.types import (
    Append,
    ColumnKind,
    Delete,
    KafkaRecord,
    Op,
    ResolvedTable,
    Upsert,
)
from relay.mirroring.values import json_object

MISSING = object()
"""What a field lookup gives for a field the value does not have."""


def operation(
    record: KafkaRecord,
    headers: Mapping[str, bytes | None],
    table: ResolvedTable,
    value: object,
    key: dict[str, object] | None,
) -> Op:
    """The record's operation on ``table``: a Delete (or, in a changelog, an Append of
    the key's delete) for a tombstone, else an Upsert (an Append) of its row; DecodeError
    at the first fault: key, scd2 timestamp, value, each column in mapping order, version.
    ``value``: the record's value as parsed; ``key``: its key columns when known."""
    mapping = table.mapping
    if key is None:
        key = key_columns(record, table)
    mode = mapping.history.mode
    if mode == "scd2" and record.timestamp_ms is None:
        raise DecodeError("record has no Kafka timestamp (history scd2 needs it)")
    if record.value is None:
        version = (
            None if mapping.version.kind == "field" else version_of(record, headers, table, None)
        )
        if mode == "changelog":
            row = {**key, **dict.fromkeys(c for c, _ in mapping.columns)}
            return Append(mapping.table, history_row(record, table, row, version, "delete"))
        return Delete(mapping.table, key, version, record.timestamp if mode == "scd2" else None)
    if not isinstance(value, dict):  # parsed by the caller
        raise DecodeError("value is not a JSON object")
    row = dict(key)
    kinds = table.kinds
    for column, path in mapping.columns:
        found = value.get(path, MISSING) if "." not in path else field_at(value, path)
        if found is MISSING:
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
    row = history_row(record, table, row, version_of(record, headers, table, value), "upsert")
    if mode == "changelog":
        return Append(mapping.table, row)
    return Upsert(mapping.table, row)


def history_row(
    record: KafkaRecord, table: ResolvedTable, row: dict[str, object], version: int | None, op: str
) -> dict[str, object]:
    """``row`` with its version, its history mode's columns the record fills (the store
    fills valid_to, is_current and applied_at) and its metadata columns."""
    mapping = table.mapping
    row[mapping.version.column] = version
    history = mapping.history
    if history.mode == "scd2":
        row[history.valid_from] = moment(record.timestamp, table.kind(history.valid_from))
    elif history.mode == "changelog":
        row[history.op] = op
    for column, what in mapping.metadata:
        if what == "kafka_timestamp":
            row[column] = moment(record.timestamp, table.kind(column))
        elif what == "topic":
            row[column] = record.topic
        elif what == "partition":
            row[column] = record.partition
        elif what == "offset":
            row[column] = record.offset
    return row


def moment(timestamp: datetime | None, kind: ColumnKind) -> datetime | None:
    """A UTC timestamp for a timestamptz column, or as naive UTC for a timestamp one."""
    if timestamp is None or kind is not ColumnKind.TIMESTAMP:
        return timestamp
    return timestamp.astimezone(UTC).replace(tzinfo=None)


def key_columns(record: KafkaRecord, table: ResolvedTable) -> dict[str, object]:
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
        found = field_at(parsed, path)
        if found is MISSING:
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


def version_of(
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
        return header_version(raw, name)
    found = field_at(value, name) if isinstance(value, dict) else MISSING
    if found is MISSING or found is None:
        raise DecodeError(f"missing version field {name!r}")
    if isinstance(found, bool) or not isinstance(found, int):
        raise DecodeError(f"version field {name!r} is {json_type(found)}, not an integer")
    return found


def header_version(raw: bytes, name: str) -> int:
    """The version in header ``name``'s value ``raw`` (not only ASCII digits): an integer
    after stripping blanks, else DecodeError."""
    text = raw.decode("ascii", "replace").strip()
    if not INTEGER_TEXT.match(text):
        raise DecodeError(f"version header {name!r} is not an integer: {short(text)!r}")
    return int(text)


def field_at(document: dict[str, object], path: str) -> object:
    if "." not in path:
        return document.get(path, MISSING)
    current: object = document
    for part in path.split("."):
        if not isinstance(current, dict) or part not in current:
            return MISSING
        current = current[part]
    return current
