"""The declarative topic-to-table mapping, read from a TOML file.

::

    [[tables]]
    table = "orders_mirror"                  # [schema.]table, created by a migration
    topics = ["orders"]
    event_types = ["OrderPlaced", "OrderShipped"]   # optional filter (event-type header)
    key = { pattern = '^order-(?P<id>[0-9]+)$' }    # or { column = "order_key" }
                                                    # or { fields = { tenant = "tenant" } }
    version = { column = "source_seq", source = "header:outbox-seq" }
    history = "scd2"                         # optional: or "changelog" (relay.mirroring.history)
    format = "avro"                          # optional: json_schema, protobuf (registry); json
    [tables.columns]                         # table column = field of the JSON value
    customer = "customer"
    city = "address.city"                    # a dotted path reaches into nested objects

Only the structure is checked here; :mod:`relay.postgres.mirror_catalog` checks the
mapping against the database (tables, columns, unique keys, types) at start-up.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from relay.errors import ConfigurationError
from relay.mirroring.history import HistoryMapping, MetadataField, parse_history, parse_metadata

VersionKind = Literal["header", "offset", "field"]

DEFAULT_VERSION_SOURCE = "header:outbox-seq"
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_TABLE_KEYS = frozenset(
    {
        "table",
        "topics",
        "key",
        "columns",
        "version",
        "event_types",
        "history",
        "history_columns",
        "metadata",
        "format",
    }
)
# How a table's records are decoded: JSON text, or a schema registry's wire format.
VALUE_FORMATS = ("json", "avro", "json_schema", "protobuf")


@dataclass(frozen=True, slots=True)
class KeyMapping:
    """How the record key becomes the key column(s); exactly one form is set."""

    column: str | None = None
    pattern: re.Pattern[str] | None = None
    fields: tuple[tuple[str, str], ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        if self.column is not None:
            return (self.column,)
        if self.pattern is not None:
            return tuple(self.pattern.groupindex)
        return tuple(column for column, _ in self.fields)


@dataclass(frozen=True, slots=True)
class VersionMapping:
    """The column that guards rows against older state, and where its value comes from."""

    column: str
    kind: VersionKind
    name: str | None = None  # header name or JSON field path

    def describe(self) -> str:
        return self.kind if self.name is None else f"{self.kind}:{self.name}"


@dataclass(frozen=True, slots=True)
class TableMapping:
    table: str
    topics: tuple[str, ...]
    key: KeyMapping
    columns: tuple[tuple[str, str], ...]  # (table column, JSON field path)
    version: VersionMapping
    event_types: frozenset[str] | None = None
    history: HistoryMapping = dataclasses.field(default_factory=HistoryMapping)
    metadata: tuple[tuple[str, MetadataField], ...] = ()  # (table column, what it holds)
    value_format: str = "json"  # one of VALUE_FORMATS

    @property
    def schema(self) -> str | None:
        schema, _, _ = self.table.rpartition(".")
        return schema or None

    @property
    def name(self) -> str:
        return self.table.rpartition(".")[2]

    @property
    def all_columns(self) -> tuple[str, ...]:
        return (
            *self.key.columns,
            *(c for c, _ in self.columns),
            self.version.column,
            *(c for c, _ in self.history.columns),
            *(c for c, _ in self.metadata),
        )


@dataclass(frozen=True, slots=True)
class MirrorMapping:
    tables: tuple[TableMapping, ...]
    source: str = "<mapping>"

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({t for table in self.tables for t in table.topics}))

    def tables_for(self, topic: str) -> tuple[TableMapping, ...]:
        return tuple(t for t in self.tables if topic in t.topics)

    def restricted_to(self, topics: tuple[str, ...]) -> MirrorMapping:
        """Only the tables fed by ``topics``, each with only those of its topics."""
        unknown = sorted(set(topics) - set(self.topics))
        if unknown:
            raise ConfigurationError(
                f"topic {unknown[0]} is not in the mapping {self.source} "
                f"(mapped topics: {', '.join(self.topics)})"
            )
        kept = []
        for table in self.tables:
            own = tuple(t for t in table.topics if t in topics)
            if own:
                kept.append(replace(table, topics=own))
        return MirrorMapping(tuple(kept), self.source)


def load_mapping(path: str | Path) -> MirrorMapping:
    """Read and check a mapping file; any problem is one ConfigurationError line."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise ConfigurationError(f"cannot read mirror mapping {source}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"mirror mapping {source} is not valid TOML: {exc}") from None
    return parse_mapping(document, source)


def parse_mapping(document: Mapping[str, object], source: str = "<mapping>") -> MirrorMapping:
    unknown = sorted(set(document) - {"tables"})
    if unknown:
        raise ConfigurationError(f"mirror mapping {source}: unknown setting {unknown[0]!r}")
    raw_tables = document.get("tables")
    if not isinstance(raw_tables, list) or not raw_tables:
        raise ConfigurationError(
            f"mirror mapping {source}: no tables (add a [[tables]] section per mirrored table)"
        )
    tables = [
        _table(raw, f"mirror mapping {source}: tables[{i}]") for i, raw in enumerate(raw_tables)
    ]
    seen: set[str] = set()
    for table in tables:
        if table.table in seen:
            raise ConfigurationError(
                f"mirror mapping {source}: table {table.table} is mapped twice "
                "(list all of its topics in one [[tables]] section)"
            )
        seen.add(table.table)
    formats: dict[str, str] = {}
    for table in tables:
        for topic in table.topics:
            known = formats.setdefault(topic, table.value_format)
            if known != table.value_format:
                raise ConfigurationError(
                    f"mirror mapping {source}: topic {topic} is mapped with format {known} "
                    f"and {table.value_format} (one topic, one format)"
                )
    return MirrorMapping(tuple(tables), source)


def _table(raw: object, where: str) -> TableMapping:
    if not isinstance(raw, dict):
        raise ConfigurationError(f"{where}: expected a table section")
    name = raw.get("table")
    if not isinstance(name, str) or not _table_name_ok(name):
        raise ConfigurationError(f'{where}: table must be "name" or "schema.name", got {name!r}')
    where = f"{where} ({name})"
    unknown = sorted(set(raw) - _TABLE_KEYS)
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown setting {unknown[0]!r} (known: {', '.join(sorted(_TABLE_KEYS))})"
        )
    topics = _string_list(raw.get("topics"), f"{where}: topics")
    for topic in topics:
        if not _TOPIC.match(topic):
            raise ConfigurationError(f"{where}: {topic!r} is not a Kafka topic name")
    key = _key(raw.get("key"), f"{where}: key")
    columns = _columns(raw.get("columns", {}), f"{where}: columns")
    version = _version(raw.get("version"), f"{where}: version")
    event_types = None
    if "event_types" in raw:
        event_types = frozenset(_string_list(raw["event_types"], f"{where}: event_types"))
    history = parse_history(raw.get("history"), raw.get("history_columns"), where)
    metadata = parse_metadata(raw.get("metadata"), where)
    value_format = raw.get("format", "json")
    if value_format not in VALUE_FORMATS:
        raise ConfigurationError(
            f"{where}: format must be one of {', '.join(VALUE_FORMATS)}, got {value_format!r}"
        )
    table = TableMapping(
        name, tuple(topics), key, columns, version, event_types, history, metadata, value_format
    )
    _check_columns_distinct(table, where)
    if history.mode != "current" and version.kind == "field":
        raise ConfigurationError(
            f"{where}: history {history.mode} needs a version every record carries, "
            "tombstones included (header:NAME or offset), not field:NAME"
        )
    if version.kind == "offset" and len(topics) > 1:
        raise ConfigurationError(
            f"{where}: version source 'offset' needs a single topic (offsets of different "
            "topics are not comparable); use header:outbox-seq or a field"
        )
    return table


def _table_name_ok(name: str) -> bool:
    parts = name.split(".")
    return 1 <= len(parts) <= 2 and all(p.strip() == p and p for p in parts)


def _string_list(raw: object, where: str) -> list[str]:
    if not isinstance(raw, list) or not raw or not all(isinstance(t, str) and t for t in raw):
        raise ConfigurationError(f"{where}: expected a non-empty list of strings")
    return list(raw)


def _key(raw: object, where: str) -> KeyMapping:
    if not isinstance(raw, dict):
        raise ConfigurationError(
            f"{where}: expected {{ column = ... }}, {{ pattern = ... }} or {{ fields = {{...}} }}"
        )
    given = sorted(set(raw) & {"column", "pattern", "fields"})
    extra = sorted(set(raw) - {"column", "pattern", "fields"})
    if len(given) != 1 or extra:
        raise ConfigurationError(f"{where}: give exactly one of column, pattern, fields")
    form = given[0]
    value = raw[form]
    if form == "column":
        if not isinstance(value, str) or not value:
            raise ConfigurationError(f"{where}: column must be a column name")
        return KeyMapping(column=value)
    if form == "pattern":
        if not isinstance(value, str):
            raise ConfigurationError(f"{where}: pattern must be a regular expression")
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise ConfigurationError(f"{where}: pattern {value!r} is invalid: {exc}") from None
        if not pattern.groupindex:
            raise ConfigurationError(
                f"{where}: pattern {value!r} has no named group; name each key column, "
                "e.g. '^order-(?P<id>[0-9]+)$'"
            )
        return KeyMapping(pattern=pattern)
    fields = _columns(value, f"{where}: fields")
    if not fields:
        raise ConfigurationError(f"{where}: fields must map at least one column")
    return KeyMapping(fields=fields)


def _columns(raw: object, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict):
        raise ConfigurationError(f'{where}: expected column = "field" pairs')
    result = []
    for column, field in raw.items():
        if not isinstance(field, str) or not field or any(not p for p in field.split(".")):
            raise ConfigurationError(
                f"{where}: {column} must name a JSON field (a.b for nested), got {field!r}"
            )
        result.append((column, field))
    return tuple(result)


def _version(raw: object, where: str) -> VersionMapping:
    if not isinstance(raw, dict) or not isinstance(raw.get("column"), str) or not raw["column"]:
        raise ConfigurationError(
            f'{where}: expected {{ column = "...", source = "{DEFAULT_VERSION_SOURCE}" }} '
            "(a version column is required: it keeps older records from overwriting newer rows)"
        )
    extra = sorted(set(raw) - {"column", "source"})
    if extra:
        raise ConfigurationError(f"{where}: unknown setting {extra[0]!r}")
    source = raw.get("source", DEFAULT_VERSION_SOURCE)
    if not isinstance(source, str):
        raise ConfigurationError(f"{where}: source must be a string")
    kind, _, name = source.partition(":")
    if kind == "offset" and not name:
        return VersionMapping(raw["column"], "offset")
    if kind == "header" and name:
        return VersionMapping(raw["column"], "header", name)
    if kind == "field" and name and all(name.split(".")):
        return VersionMapping(raw["column"], "field", name)
    raise ConfigurationError(
        f"{where}: source must be header:NAME, offset or field:NAME, got {source!r}"
    )


def _check_columns_distinct(table: TableMapping, where: str) -> None:
    seen: dict[str, str] = {}
    roles = [
        *((c, "key") for c in table.key.columns),
        *((c, "value") for c, _ in table.columns),
        (table.version.column, "version"),
        *((c, role) for c, role in table.history.columns),
        *((c, "metadata") for c, _ in table.metadata),
    ]
    for column, role in roles:
        if column in seen:
            raise ConfigurationError(
                f"{where}: column {column} is mapped twice (as {seen[column]} and {role} column)"
            )
        seen[column] = role
