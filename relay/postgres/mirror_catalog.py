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
    key = frozenset(mapping.key.columns)
    if key not in unique_sets:
        raise ConfigurationError(
            f"{where} needs a primary key or unique constraint on exactly its key columns "
            f"({', '.join(mapping.key.columns)}) for version-guarded upserts"
        )
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
    return ResolvedTable(mapping, kinds)
