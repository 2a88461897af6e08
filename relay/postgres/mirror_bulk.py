"""A batch applied to one mirrored table in bulk: its operations COPYed into a staging
table, then a few set-based statements.

Per batch and table (``current`` and ``changelog`` tables; ``scd2`` tables go record by
record, mirror_statements)::

    once per connection (the staging table is emptied at each commit; creating and
    dropping one per batch cost a round trip and churned the system catalogs):
    CREATE TEMP TABLE IF NOT EXISTS relay_mirror_stage_<shape> ON COMMIT DELETE ROWS AS
        SELECT <op, guard, round>, <the row's columns> FROM t WITH NO DATA   (t's types)
    COPY relay_mirror_stage_<shape> FROM STDIN              (one row per operation)
    current, per round R (relay.mirroring.bulk: the R-th operation of each key):
        DELETE FROM t USING stage WHERE round = R AND op = 'd' AND key matches
            AND (guard IS NULL OR t.version <= guard)
        INSERT INTO t SELECT ... FROM stage WHERE round = R AND op = 'u' ORDER BY key
            ON CONFLICT (key) DO UPDATE SET ... WHERE t.version < EXCLUDED.version
    changelog: INSERT INTO t SELECT ... FROM stage ORDER BY round ON CONFLICT DO NOTHING
               (round: the record order, so the first of two rows with one unique key stays)

Each statement does what the record-by-record statements do to each of its rows, and a
key's operations run in record order. A current table whose key the database compares
otherwise than Python (a column of another type than integers, text of the default or C
collation, numbers, uuid, bytea, dates and times, booleans) goes record by record, and
so do a batch's hot keys (more than ``ROUNDS_LIMIT`` operations). All of it runs in the
batch's transaction: when a statement fails, the store rolls the batch back and applies
it again record by record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter

import psycopg
import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql

from relay.mirroring.bulk import split_rounds
from relay.mirroring.types import Append, ColumnKind, Delete, Op, ResolvedTable, Upsert

_PREPARER = postgresql.psycopg.dialect().identifier_preparer  # type: ignore[no-untyped-call]
_OP, _GUARD, _ROUND = "relay_stage_op", "relay_stage_guard", "relay_stage_round"
_STAGING_TABLES = "relay_mirror_staging_tables"  # in the connection's info: created there
_SAME_EQUALITY = frozenset(
    {
        ColumnKind.INTEGER,
        ColumnKind.NUMERIC,
        ColumnKind.UUID,
        ColumnKind.BYTES,
        ColumnKind.DATE,
        ColumnKind.TIMESTAMP,
        ColumnKind.TIMESTAMPTZ,
        ColumnKind.BOOLEAN,
    }
)
"""Key column kinds whose values are equal in Python exactly when PostgreSQL finds them
equal (and text of a deterministic collation, below)."""
ByRecord = Callable[[Connection, Sequence[Op]], None]


class BulkWriter:
    """A batch's operations, table by table in the order the tables first appear: in bulk
    where the table allows, else record by record (``by_record``: the store's pipelined
    statements)."""

    def __init__(
        self,
        tables: Sequence[ResolvedTable],
        reflected: Mapping[str, sa.Table],
        by_record: ByRecord,
    ) -> None:
        self._bulk = {
            t.table: BulkTable(t, reflected[t.table])
            for t in tables
            if t.mapping.history.mode == "changelog"
            or (t.mapping.history.mode == "current" and _same_equality(t, reflected[t.table]))
        }
        self._by_record = by_record

    def apply(self, conn: Connection, ops: Sequence[Op]) -> None:
        by_table: dict[str, list[Op]] = {}
        for op in ops:
            by_table.setdefault(op.table, []).append(op)
        for table, table_ops in by_table.items():
            bulk = self._bulk.get(table)
            left = table_ops if bulk is None else bulk.apply(conn, table_ops)
            if left:
                self._by_record(conn, left)


class BulkTable:
    """The bulk SQL of one ``current`` or ``changelog`` table."""

    def __init__(self, resolved: ResolvedTable, table: sa.Table) -> None:
        mapping = resolved.mapping
        self._changelog = mapping.history.mode == "changelog"
        self._key = mapping.key.columns
        applied = [c for c, what in mapping.metadata if what == "applied_at"]
        self._columns: tuple[str, ...] = (
            *mapping.key.columns,
            *(c for c, _ in mapping.columns),
            mapping.version.column,
            *([mapping.history.op] if self._changelog else []),
            *(c for c, what in mapping.metadata if what != "applied_at"),
        )
        self._json = tuple(
            n for n, c in enumerate(self._columns) if resolved.kind(c) is ColumnKind.JSON
        )
        self._pick = itemgetter(*self._columns)
        self._blank = (None,) * (len(self._columns) - len(self._key))
        q = _PREPARER.quote
        target = _PREPARER.format_table(table)
        listed = ", ".join(q(c) for c in self._columns)
        shape = (
            f'NULL::"char" AS {_OP}, NULL::bigint AS {_GUARD}, NULL::integer AS {_ROUND}, '
            f"{listed} FROM {target}"
        )
        # Named after its shape: a session's stores of other tables never share it.
        digest = hashlib.blake2b(shape.encode(), digest_size=10).hexdigest()
        self._stage_name = f"relay_mirror_stage_{digest}"
        stage = q(self._stage_name)
        self._create = (
            f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS SELECT "
            f"{shape} WITH NO DATA"
        )
        self._copy = f"COPY {stage} ({_OP}, {_GUARD}, {_ROUND}, {listed}) FROM STDIN"
        inserted = ", ".join(q(c) for c in (*self._columns, *applied))
        values = ", ".join([*(q(c) for c in self._columns), *("now()" for _ in applied)])
        insert = f"INSERT INTO {target} AS relay_target ({inserted}) SELECT {values} FROM {stage}"
        if self._changelog:
            self._insert = f"{insert} ORDER BY {_ROUND} ON CONFLICT DO NOTHING"
            self._delete = ""
            return
        version = q(mapping.version.column)
        updated = [
            *(c for c, _ in mapping.columns),
            mapping.version.column,
            *(c for c, _ in mapping.metadata),
        ]
        keys = ", ".join(q(k) for k in self._key)
        # A round holds each key once, so its order changes no result. In key order
        # PostgreSQL updated 73 % of the rows in place (HOT: no new index entry) against
        # 16 % in record order, and the table stayed under half the size
        # (docs/performance.md, "The mirror's upserts in key order").
        self._insert = (
            f"{insert} WHERE {_ROUND} = %s AND {_OP} = 'u' "
            f"ORDER BY {keys} ON CONFLICT ({keys}) DO UPDATE SET "
            + ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in updated)
            + f" WHERE relay_target.{version} < EXCLUDED.{version}"
        )
        matches = " AND ".join(f"relay_target.{q(k)} = s.{q(k)}" for k in self._key)
        self._delete = (
            f"DELETE FROM {target} AS relay_target USING {stage} AS s "
            f"WHERE s.{_ROUND} = %s AND s.{_OP} = 'd' AND {matches} "
            f"AND (s.{_GUARD} IS NULL OR relay_target.{version} <= s.{_GUARD})"
        )

    def apply(self, conn: Connection, ops: Sequence[Op]) -> Sequence[Op]:
        """Apply ``ops`` (this table's, in record order); returns those left to apply
        record by record."""
        if self._changelog:
            appends = [op for op in ops if isinstance(op, Append)]
            if len(appends) != len(ops):
                return ops
            rows = (("a", None, n, *self._values(op.row)) for n, op in enumerate(appends))
            self._stage(conn, rows)
            conn.exec_driver_sql(self._insert)
            return ()
        split = split_rounds(ops, self._key)
        if split is None:
            return ops
        kinds: list[set[str]] = [set() for _ in split.rounds]  # per round: "u", "d"
        self._stage(conn, self._rows(split.rounds, kinds))
        for number, found in enumerate(kinds):
            if "d" in found:
                conn.exec_driver_sql(self._delete, (number,))
            if "u" in found:
                conn.exec_driver_sql(self._insert, (number,))
        return split.by_record

    def _rows(
        self, rounds: Sequence[Sequence[Upsert | Delete]], kinds: Sequence[set[str]]
    ) -> Iterable[tuple[object, ...]]:
        """The staging rows of ``rounds``; ``kinds[n]`` gets the kinds round n holds."""
        values = self._pick if not self._json else self._values  # the first: one C call
        for number, round_ops in enumerate(rounds):
            upserts = deletes = False
            for op in round_ops:
                if isinstance(op, Upsert):
                    upserts = True
                    yield ("u", None, number, *values(op.row))
                else:
                    deletes = True
                    yield ("d", op.version, number, *(op.key[k] for k in self._key), *self._blank)
            if upserts:
                kinds[number].add("u")
            if deletes:
                kinds[number].add("d")

    def _values(self, row: Mapping[str, object]) -> Sequence[object]:
        values: tuple[object, ...] = self._pick(row)  # one C call: a row has its key and version
        if not self._json:
            return values
        found = list(values)
        for n in self._json:
            if found[n] is not None:
                found[n] = json.dumps(found[n])
        return found

    def _stage(self, conn: Connection, rows: Iterable[tuple[object, ...]]) -> None:
        staged = conn.info.setdefault(_STAGING_TABLES, set())
        if self._stage_name not in staged:
            conn.exec_driver_sql(self._create)
            staged.add(self._stage_name)
        driver = conn.connection.driver_connection
        if not isinstance(driver, psycopg.Connection):  # the engine factory makes psycopg's
            raise TypeError(f"COPY needs a psycopg connection, not {type(driver).__name__}")
        try:
            with driver.cursor() as cursor, cursor.copy(self._copy) as copy:
                for row in rows:
                    copy.write_row(row)
        except psycopg.Error as exc:  # as SQLAlchemy would raise it: the store's handling
            raise sa.exc.DBAPIError.instance(self._copy, None, exc, psycopg.Error) from exc


def forget_staging_tables(conn: Connection) -> None:
    """After a rolled-back transaction: the staging tables it created are gone, and are
    created again when next needed (``CREATE ... IF NOT EXISTS``: those created before
    it are still there)."""
    conn.info.pop(_STAGING_TABLES, None)


def _same_equality(resolved: ResolvedTable, table: sa.Table) -> bool:
    """Whether Python finds two values of each key column equal exactly when PostgreSQL
    does (so a round never holds one key twice)."""
    for column in resolved.mapping.key.columns:
        kind = resolved.kind(column)
        if kind is ColumnKind.TEXT:
            if getattr(table.c[column].type, "collation", None) not in (None, "C", "POSIX"):
                return False
        elif kind not in _SAME_EQUALITY:
            return False
    return True
