"""Start-up check of a mapping against the database: tables, columns, unique keys, types.

Every problem is one ConfigurationError line that names the table and what to fix.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import ReflectedIndex

from relay.errors import ConfigurationError
from relay.mirroring.mapping import MirrorMapping, TableMapping
from relay.mirroring.types import ColumnKind, ResolvedTable
from relay.postgres.engine import Database


def column_kind(column_type: sa.types.TypeEngine[Any]) -> ColumnKind:
    """How record values are checked for a column of this reflected type."""
    checks: tuple[tuple[type[sa.types.TypeEngine[Any]], ColumnKind], ...] = (
        (sa.Boolean, ColumnKind.BOOLEAN),
        (sa.Integer, ColumnKind.INTEGER),
        (sa.Float, ColumnKind.FLOAT),
        (sa.Numeric, ColumnKind.NUMERIC),
        (sa.JSON, ColumnKind.JSON),
        (sa.Date, ColumnKind.DATE),
        (sa.Uuid, ColumnKind.UUID),
        (sa.LargeBinary, ColumnKind.BYTES),
        (sa.String, ColumnKind.TEXT),
    )
    if isinstance(column_type, sa.DateTime):
        return ColumnKind.TIMESTAMPTZ if column_type.timezone else ColumnKind.TIMESTAMP
    if isinstance(column_type, sa.Enum):
        return ColumnKind.OTHER  # the database checks the label
    for kind_type, kind in checks:
        if isinstance(column_type, kind_type):
            return kind
    return ColumnKind.OTHER


def resolve_tables(
    database: Database, mapping: MirrorMapping
) -> tuple[tuple[ResolvedTable, ...], dict[str, sa.Table]]:
    """The mapping's tables checked against the database, and their reflected tables."""
    resolved: list[ResolvedTable] = []
    reflected: dict[str, sa.Table] = {}
    with database.connect("reading the mirrored tables") as conn:
        inspector = sa.inspect(conn)
        for table_mapping in mapping.tables:
            where = f"mirror mapping {mapping.source}: table {table_mapping.table}"
            if not inspector.has_table(table_mapping.name, schema=table_mapping.schema):
                raise ConfigurationError(
                    f"{where} does not exist in the database "
                    "(create it with a migration, see docs/mirror.md)"
                )
            table = sa.Table(
                table_mapping.name, sa.MetaData(), autoload_with=conn, schema=table_mapping.schema
            )
            unique_sets = _unique_column_sets(inspector, table_mapping)
            resolved.append(_resolve(table_mapping, table, unique_sets, where))
            reflected[table_mapping.table] = table
    return tuple(resolved), reflected


def _unique_column_sets(inspector: sa.Inspector, mapping: TableMapping) -> list[frozenset[str]]:
    name, schema = mapping.name, mapping.schema
    sets = []
    primary = inspector.get_pk_constraint(name, schema=schema).get("constrained_columns")
    if primary:
        sets.append(frozenset(primary))
    for constraint in inspector.get_unique_constraints(name, schema=schema):
        sets.append(frozenset(constraint["column_names"]))
    for index in inspector.get_indexes(name, schema=schema):
        if index.get("unique") and _plain(index):
            sets.append(frozenset(c for c in index["column_names"] if c is not None))
    return sets


def _plain(index: ReflectedIndex) -> bool:
    """A unique index ON CONFLICT can infer from its columns: no expressions, no WHERE."""
    if any(c is None for c in index["column_names"]):
        return False
    options = index.get("dialect_options") or {}
    return options.get("postgresql_where") is None


def _resolve(
    mapping: TableMapping, table: sa.Table, unique_sets: list[frozenset[str]], where: str
) -> ResolvedTable:
    missing = [c for c in mapping.all_columns if c not in table.c]
    if missing:
        raise ConfigurationError(
            f"{where} has no column {missing[0]} (columns: {', '.join(table.c.keys())})"
        )
    _check_unique(mapping, unique_sets, where)
    kinds = {column: column_kind(table.c[column].type) for column in mapping.all_columns}
    version_kind = kinds[mapping.version.column]
    if version_kind is not ColumnKind.INTEGER:
        raise ConfigurationError(
            f"{where}: version column {mapping.version.column} must be an integer column "
            f"(bigint), not {table.c[mapping.version.column].type}"
        )
    for column in mapping.key.columns:
        if kinds[column] is ColumnKind.JSON:
            raise ConfigurationError(f"{where}: key column {column} cannot be json/jsonb")
    _check_history_kinds(mapping, table, kinds, where)
    if mapping.history.mode == "changelog":
        for column, _ in mapping.columns:
            if not table.c[column].nullable:
                raise ConfigurationError(
                    f"{where}: column {column} must allow NULL (a delete's row has no value)"
                )
    return ResolvedTable(mapping, kinds)


def _check_unique(mapping: TableMapping, unique_sets: list[frozenset[str]], where: str) -> None:
    key = frozenset(mapping.key.columns)
    mode = mapping.history.mode
    if mode == "current":
        if key not in unique_sets:
            raise ConfigurationError(
                f"{where} needs a primary key or unique constraint on exactly its key columns "
                f"({', '.join(mapping.key.columns)}) for version-guarded upserts"
            )
        return
    shown = ", ".join(mapping.key.columns)
    if key in unique_sets:
        raise ConfigurationError(
            f"{where} keeps one row per version: its key columns ({shown}) cannot be unique "
            "alone (make the key columns and the version column unique together)"
        )
    with_version = key | {mapping.version.column}
    where_from = {what: column for column, what in mapping.metadata}
    record = frozenset(where_from.get(w, "") for w in ("topic", "partition", "offset"))
    if with_version in unique_sets or (mode == "changelog" and record in unique_sets):
        return
    also = ", or on its topic, partition and offset metadata columns"
    raise ConfigurationError(
        f"{where} needs a unique constraint on ({shown}, {mapping.version.column}) for "
        f"history mode {mode}{also if mode == 'changelog' else ''}: applying a record again "
        "must change nothing"
    )


_TIME = (ColumnKind.TIMESTAMPTZ, ColumnKind.TIMESTAMP)
_METADATA_KINDS: dict[str, tuple[tuple[ColumnKind, ...], str]] = {
    "kafka_timestamp": (_TIME, "timestamptz or timestamp"),
    "applied_at": (_TIME, "timestamptz or timestamp"),
    "topic": ((ColumnKind.TEXT,), "text"),
    "partition": ((ColumnKind.INTEGER,), "an integer"),
    "offset": ((ColumnKind.INTEGER,), "an integer (bigint)"),
    "valid_from": (_TIME, "timestamptz or timestamp"),
    "valid_to": (_TIME, "timestamptz or timestamp"),
    "is_current": ((ColumnKind.BOOLEAN,), "boolean"),
    "op": ((ColumnKind.TEXT,), "text"),
}


def _check_history_kinds(
    mapping: TableMapping, table: sa.Table, kinds: dict[str, ColumnKind], where: str
) -> None:
    """The history mode's and the metadata columns' types."""
    checked = [
        *((column, role, f"{role} column {column}") for column, role in mapping.history.columns),
        *((c, what, f"metadata column {c} ({what})") for c, what in mapping.metadata),
    ]
    for column, role, shown in checked:
        allowed, needed = _METADATA_KINDS[role]
        if kinds[column] not in allowed:
            raise ConfigurationError(
                f"{where}: {shown} must be {needed}, not {table.c[column].type}"
            )
