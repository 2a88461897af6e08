"""The SQL of one mirrored table, by history mode; each statement runs as one executemany
per run of consecutive operations (psycopg pipelines them), in record order.

* ``current``: ``INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE version < new``; a
  tombstone ``DELETE``\\ s the key's row if its version is at most the tombstone's.
* ``scd2``: one statement per version (scd2 insert below); a tombstone closes the key's
  current version if it is at most the tombstone's (``valid_to`` = its timestamp).
* ``changelog``: ``INSERT ... ON CONFLICT DO NOTHING``.

The scd2 insert, for a record (key K, version V, valid_from F)::

    WITH ins AS (
      INSERT INTO t (..., valid_to, is_current) VALUES (..., <valid_from of the next
          higher version of K, if any>, <no higher version of K>)
      ON CONFLICT (K's columns, version) DO NOTHING RETURNING valid_to)
    UPDATE t SET valid_to = F, is_current = false      -- close the version before V ...
    WHERE key = K AND EXISTS (SELECT 1 FROM ins)       -- ... only when V is new,
      AND version = (SELECT max(version) FROM t WHERE key = K AND version < V)
      AND valid_to IS NOT DISTINCT FROM (SELECT valid_to FROM ins)
                    -- ... and only if it was open or closed by the version after V
                    -- (not by a tombstone)

A record applied again (a replay, a retried batch) hits the unique (key, version)
constraint and changes nothing; a late older version is inserted closed, between its
neighbours, and never becomes current.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql

from relay.mirroring.types import Append, Delete, Op, ResolvedTable, Upsert

_PREPARER = postgresql.psycopg.dialect().identifier_preparer  # type: ignore[no-untyped-call]


class TableStatements:
    def __init__(self, resolved: ResolvedTable, table: sa.Table) -> None:
        mapping = resolved.mapping
        for column in table.c:  # a JSON null field becomes SQL NULL, not JSON 'null'
            if isinstance(column.type, postgresql.JSONB):
                column.type = postgresql.JSONB(none_as_null=True)
            elif isinstance(column.type, sa.JSON):
                column.type = postgresql.JSON(none_as_null=True)
        self._table = table
        self._history = mapping.history
        applied = [c for c, what in mapping.metadata if what == "applied_at"]
        self._now = {c: sa.func.now() for c in applied}
        self._version = table.c[mapping.version.column]
        self.key_columns = mapping.key.columns
        match_key = [table.c[k] == sa.bindparam(f"key_{i}") for i, k in enumerate(self.key_columns)]
        self._delete: sa.Executable = sa.delete(table).where(*match_key)
        self._delete_guarded: sa.Executable = sa.delete(table).where(
            *match_key, self._version <= sa.bindparam("guard_version")
        )
        self._append = postgresql.insert(table).values(self._now).on_conflict_do_nothing()
        if self._history.mode == "scd2":
            history = self._history
            current = table.c[history.is_current]
            close = sa.update(table).values(
                {history.valid_to: sa.bindparam("closed_at"), history.is_current: False}
            )
            self._delete = close.where(*match_key, current.is_(True))
            self._delete_guarded = close.where(
                *match_key, current.is_(True), self._version <= sa.bindparam("guard_version")
            )
            row_columns = [
                *mapping.key.columns,
                *(c for c, _ in mapping.columns),
                mapping.version.column,
                history.valid_from,
                *(c for c, what in mapping.metadata if what != "applied_at"),
            ]
            self._scd2_columns = row_columns
            self._upsert: sa.Executable = self._scd2_insert(row_columns, applied)
        else:
            insert = postgresql.insert(table).values(self._now)
            updated = [
                *(c for c, _ in mapping.columns),
                mapping.version.column,
                *(c for c, _ in mapping.metadata),
            ]
            self._upsert = insert.on_conflict_do_update(
                index_elements=[table.c[k] for k in mapping.key.columns],
                set_={c: insert.excluded[c] for c in updated},
                where=self._version < insert.excluded[mapping.version.column],
            )

    def run(self, conn: Connection, ops: Sequence[Op], guarded: bool) -> None:
        """Operations of one kind (``guarded``: deletes with a version) on this table."""
        first = ops[0]
        if isinstance(first, Upsert):
            rows = [op.row for op in ops if isinstance(op, Upsert)]
            if self._history.mode == "scd2":
                names = self._scd2_columns
                rows = [{f"p{i}": row[c] for i, c in enumerate(names)} for row in rows]
            conn.execute(self._upsert, rows)
        elif isinstance(first, Append):
            conn.execute(self._append, [op.row for op in ops if isinstance(op, Append)])
        else:
            params = [self._delete_params(op) for op in ops if isinstance(op, Delete)]
            conn.execute(self._delete_guarded if guarded else self._delete, params)

    def _delete_params(self, op: Delete) -> dict[str, object]:
        params = {f"key_{i}": op.key[k] for i, k in enumerate(self.key_columns)}
        if op.version is not None:
            params["guard_version"] = op.version
        if self._history.mode == "scd2":
            params["closed_at"] = op.at
        return params

    def _scd2_insert(self, columns: Sequence[str], applied: Sequence[str]) -> sa.TextClause:
        history, q = self._history, _PREPARER.quote
        table = _PREPARER.format_table(self._table)
        place = {c: f":p{i}" for i, c in enumerate(columns)}
        version, valid_to = q(self._version.name), q(history.valid_to)
        key = " AND ".join(f"{q(k)} = {place[k]}" for k in self.key_columns)
        later = f"FROM {table} WHERE {key} AND {version} > {place[self._version.name]}"
        names = [*columns, history.valid_to, history.is_current, *applied]
        values = [
            *(place[c] for c in columns),
            f"(SELECT min({q(history.valid_from)}) {later})",
            f"NOT EXISTS (SELECT 1 {later})",
            *("now()" for _ in applied),
        ]
        conflict = ", ".join(q(c) for c in (*self.key_columns, self._version.name))
        sql = (
            f"WITH ins AS (INSERT INTO {table} ({', '.join(q(n) for n in names)}) "
            f"VALUES ({', '.join(values)}) ON CONFLICT ({conflict}) DO NOTHING "
            f"RETURNING {valid_to}) "
            f"UPDATE {table} SET {valid_to} = {place[history.valid_from]}, "
            f"{q(history.is_current)} = false "
            f"WHERE {key} AND EXISTS (SELECT 1 FROM ins) "
            f"AND {version} = (SELECT max({version}) FROM {table} WHERE {key} "
            f"AND {version} < {place[self._version.name]}) "
            f"AND {valid_to} IS NOT DISTINCT FROM (SELECT {valid_to} FROM ins)"
        )
        types = [sa.bindparam(f"p{i}", type_=self._table.c[c].type) for i, c in enumerate(columns)]
        return sa.text(sql).bindparams(*types)
