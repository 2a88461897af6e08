"""A table's row builder, compiled once per mapping: the row of a record that has a value.

:func:`relay.mirroring.rows.operation` builds a row column by column, looking up each
column's kind and path for every record. A mapped table's columns never change while the
mirror runs, so :func:`compile_row` writes that loop out once, as the source of one
function with a line per column, and compiles it: each column's lookup, its kind's check
(a ``str`` for text, an ``int`` for an integer, ...: the value as it is; anything else through
:func:`~relay.mirroring.conversions.from_json`), the version and the history and metadata
columns, then one dict display. It raises the same DecodeError, with the same reason, as
:func:`~relay.mirroring.rows.operation` at the same first fault (key, scd2 timestamp,
value, each column in mapping order, version), and builds an equal row with its columns
in the same order (tests/unit/mirroring/test_row_builder.py compares both on every form).

The generated source holds no text of the mapping: column names, paths, messages and
kinds are constants handed to it by name (``N0``, ``P0``, ``M0``, ``K0``, ...), so no
mapping can change what the code does. A key read by ``fields`` or ``pattern`` and a
version read from a field go through the helpers of :mod:`relay.mirroring.rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

from relay.errors import DecodeError
from relay.mirroring.conversions import from_json, from_text
from relay.mirroring.rows import (
    MISSING,
    field_at,
    header_version,
    key_columns,
    moment,
    version_of,
)
from relay.mirroring.types import ColumnKind, KafkaRecord, ResolvedTable

RowBuilder = Callable[[KafkaRecord, Mapping[str, bytes | None], object], dict[str, object]]
"""(record, its headers as a dict, its parsed value) -> the row; DecodeError when the
record does not fit the table. Only for records with a value (not tombstones)."""

_AS_IS: dict[ColumnKind, str] = {
    ColumnKind.TEXT: "str",
    ColumnKind.INTEGER: "int",
    ColumnKind.BOOLEAN: "bool",
    ColumnKind.FLOAT: "float",
}
"""The kinds whose values of exactly this Python type from_json gives back unchanged."""


def compile_row(table: ResolvedTable) -> RowBuilder:
    """The row builder of ``table`` (see the module doc)."""
    source, constants = _source(table)
    namespace: dict[str, object] = {
        "DecodeError": DecodeError,
        "MISSING": MISSING,
        "from_json": from_json,
        "from_text": from_text,
        "field_at": field_at,
        "header_version": header_version,
        "key_columns": key_columns,
        "moment": moment,
        "version_of": version_of,
        "TABLE": table,
        **constants,
    }
    # Our own template, filled with generated names only (see the module doc).
    exec(compile(source, f"<row builder of {table.table}>", "exec"), namespace)  # noqa: S102
    return cast(RowBuilder, namespace["build"])


def row_source(table: ResolvedTable) -> str:
    """The source :func:`compile_row` compiles for ``table`` (for reading, and tests)."""
    return _source(table)[0]


def _source(table: ResolvedTable) -> tuple[str, dict[str, object]]:
    mapping = table.mapping
    constants: dict[str, object] = {}
    lines = ["def build(record, headers, value):"]
    items: list[str] = []  # the dict display's entries, in operation()'s column order

    def name(prefix: str, value: object) -> str:
        found = f"{prefix}{len(constants)}"
        constants[found] = value
        return found

    items += _key_lines(table, lines, name)
    if mapping.history.mode == "scd2":
        lines += [
            "    if record.timestamp_ms is None:",
            "        raise DecodeError('record has no Kafka timestamp (history scd2 needs it)')",
        ]
    lines += [
        "    if not isinstance(value, dict):",
        "        raise DecodeError('value is not a JSON object')",
        "    get = value.get",
    ]
    for number, (column, path) in enumerate(mapping.columns):
        found = f"c{number}"
        if "." in path:
            lines.append(f"    {found} = field_at(value, {name('P', path)})")
        else:
            lines.append(f"    {found} = get({name('P', path)}, MISSING)")
        missing = name("M", f"missing field {path!r} (column {column})")
        lines += [f"    if {found} is MISSING:", f"        raise DecodeError({missing})"]
        lines += _conversion(found, table.kind(column), f"field {path!r}", name)
        items.append(f"{name('N', column)}: {found}")
    lines += _version_lines(table, name)
    items.append(f"{name('N', mapping.version.column)}: version")
    history = mapping.history
    if history.mode == "scd2":
        kind = name("K", table.kind(history.valid_from))
        items.append(f"{name('N', history.valid_from)}: moment(record.timestamp, {kind})")
    elif history.mode == "changelog":
        items.append(f"{name('N', history.op)}: 'upsert'")
    for column, what in mapping.metadata:
        if what == "kafka_timestamp":
            kind = name("K", table.kind(column))
            items.append(f"{name('N', column)}: moment(record.timestamp, {kind})")
        elif what in ("topic", "partition", "offset"):
            items.append(f"{name('N', column)}: record.{what}")
    lines.append("    return {" + ", ".join(items) + "}")
    return "\n".join(lines) + "\n", constants


def _key_lines(
    table: ResolvedTable, lines: list[str], name: Callable[[str, object], str]
) -> list[str]:
    """Append the key's lines; the dict display's entries of the key columns."""
    key = table.mapping.key
    column = key.column
    if column is None:  # fields or pattern: the definition's own helper
        lines.append("    key = key_columns(record, TABLE)")
        return ["**key"]
    kind = table.kind(column)
    lines += [
        "    key = record.key",
        "    if key is None:",
        "        raise DecodeError('record has no key')",
    ]
    if kind is not ColumnKind.BYTES:
        lines += [
            "    try:",
            "        key = key.decode('utf-8')",
            "    except UnicodeDecodeError:",
            "        raise DecodeError('key is not UTF-8 text') from None",
        ]
        if kind is not ColumnKind.TEXT:
            lines.append(f"    key = from_text({name('K', kind)}, key, 'key')")
    return [f"{name('N', column)}: key"]


def _conversion(
    found: str, kind: ColumnKind, what: str, name: Callable[[str, object], str]
) -> list[str]:
    """The lines that check and convert the variable ``found`` for a column of ``kind``,
    as :func:`~relay.mirroring.rows.operation` does: None as it is, a value that already
    has the kind's type as it is, anything else through from_json."""
    if kind is ColumnKind.JSON:  # from_json gives any value back as it is
        return []
    call = f"{found} = from_json({name('K', kind)}, {found}, {name('W', what)})"
    held = _AS_IS.get(kind)
    if held is None:
        return [f"    if {found} is not None:", f"        {call}"]
    return [f"    if {found} is not None and type({found}) is not {held}:", f"        {call}"]


def _version_lines(table: ResolvedTable, name: Callable[[str, object], str]) -> list[str]:
    version = table.mapping.version
    if version.kind == "offset":
        return ["    version = record.offset"]
    if version.kind == "header":
        header = name("H", version.name or "")
        missing = name("M", f"version header {version.name or ''!r} is missing")
        return [
            f"    version = headers.get({header})",
            "    if version is None:",
            f"        raise DecodeError({missing})",
            "    version = int(version) if version.isdigit() else "
            f"header_version(version, {header})",
        ]
    return ["    version = version_of(record, headers, TABLE, value)"]
