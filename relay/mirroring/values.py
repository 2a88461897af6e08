"""A record value as the mapping's columns read it: JSON text, or a schema registry
format decoded through the :class:`~relay.mirroring.ports.ValueDecoder` port; and the
fields of a registry-format value that no column takes (schema evolution, reported).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

from relay.errors import DecodeError
from relay.mirroring.mapping import TableMapping
from relay.mirroring.ports import ValueDecoder

_SCAN: Callable[[str, int], tuple[object, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""What ``JSONDecoder.raw_decode`` calls (the C scanner), without its Python frame (set by
``JSONDecoder.__init__``; typeshed does not declare it)."""


def json_object(raw: bytes, what: str) -> dict[str, object]:
    """``raw`` (a record's ``what``: key or value) as a JSON object; DecodeError if not.

    What ``json.loads(raw)`` gives, without its guess of the encoding for the usual case:
    text that starts with ``{`` and no NUL is what ``json.detect_encoding`` calls UTF-8,
    decoded the way ``json.loads`` decodes it (surrogatepass). The rest goes through
    ``json.loads`` itself (UTF-16 and UTF-32, a byte order mark, not an object)."""
    try:
        if raw[:1] == b"{" and raw[1:2] != b"\x00":
            text = raw.decode("utf-8", "surrogatepass")
            try:
                parsed, end = _SCAN(text, 0)
            except StopIteration:  # never for a "{" (an object or a JSONDecodeError)
                parsed, end = json.loads(raw), len(text)
            if end != len(text) and text[end:].strip(" \t\n\r"):
                parsed = json.loads(raw)  # raises json's own "Extra data" error
        else:
            parsed = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DecodeError(f"{what} is not JSON: {_short(str(exc))}") from None
    if not isinstance(parsed, dict):
        raise DecodeError(f"{what} is JSON {type(parsed).__name__}, not an object")
    return parsed


def parse_value(raw: bytes, topic: str, value_format: str, decoder: ValueDecoder | None) -> object:
    """The value as an object; DecodeError when it is not one (dead-lettered). A registry
    outage (RetriableError) goes up to the loop, which retries the batch."""
    if value_format == "json":
        return json_object(raw, "value")
    if decoder is None:
        raise DecodeError(f"value format {value_format} needs a schema registry (none configured)")
    decoded = decoder.decode(value_format, topic, raw)
    if not isinstance(decoded, dict):
        raise DecodeError(f"{value_format} value is {type(decoded).__name__}, not a record")
    return decoded


def unmapped_fields(value: object, table: TableMapping) -> list[tuple[str, str, str]]:
    """(table, field, the ALTER TABLE to run) of each top-level field of a registry-format
    ``value`` that no column of ``table`` reads: a field added upstream that the table has
    no column for yet (JSON values are free-form: not reported). A field named like a column
    the table fills from elsewhere (its key, its version) has its column: not reported."""
    if table.value_format == "json" or not isinstance(value, Mapping):
        return []
    fields = sorted(set(value) - _read_fields(table) - set(table.all_columns))
    return [(table.table, f, add_column_hint(table, f, value[f])) for f in fields]


def _read_fields(table: TableMapping) -> set[str]:
    paths: Iterable[str] = (
        *(path for _, path in table.columns),
        *(path for _, path in table.key.fields),
        *((table.version.name,) if table.version.kind == "field" and table.version.name else ()),
    )
    return {path.split(".")[0] for path in paths}


def add_column_hint(table: TableMapping, field: str, value: object) -> str:
    """The statement that makes room for ``field`` (then map it in the mapping's columns),
    its type guessed from one value."""
    return f"ALTER TABLE {table.table} ADD COLUMN {field} {_sql_type(value)}"


def _sql_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double precision"
    if isinstance(value, dict | list):
        return "jsonb"
    return "text"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
