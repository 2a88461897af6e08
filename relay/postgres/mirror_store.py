"""The mirror's PostgreSQL edge: offsets (compare-and-set), row operations, dead letters.

One transaction applies one batch, or the batches of several partitions together
(``apply_together``: each offset as below, then the row operations of all)::

    UPDATE mirror_offsets SET next_offset = :next, topic_id = :id, topic_partitions = :n
    WHERE ... AND next_offset = :expected AND (topic_id IS NULL OR topic_id = :id)
    (or INSERT ... ON CONFLICT DO NOTHING for a partition's first batch; 0 rows: conflict)
    (the batch's latest heartbeats into mirror_heartbeats, after the offset: mirror_freshness)
    the row operations in bulk (mirror_bulk: COPY into a staging table, a few set-based
        statements); when they fail, the transaction rolls back. Batches applied
        together are then applied one at a time; one batch is applied again: on a
        constraint or data error, one SAVEPOINT per record (mirror_statements),
        dead-lettering the failures; on another error (e.g. no right to create a
        temporary table), the operations in record order in one SAVEPOINT
        (mirror_statements, pipelined), then per record as above, and later batches try
        the bulk statements inside a SAVEPOINT
    INSERT INTO mirror_dead_letters ...
    COMMIT

Batches applied together in one transaction give what they give applied one after the
other: their operations run in that order. The offset rows are locked first (in
partition order), so two instances on one partition serialize there: the second one
waits, then finds the offset moved and rolls back without writing a row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from itertools import groupby

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError

from relay.errors import MirrorOffsetConflict, RecordMayHealError
from relay.mirroring.reporting import tp_text
from relay.mirroring.types import (
    Append,
    ApplyResult,
    Batch,
    DeadLetter,
    Op,
    ResolvedTable,
    StoredOffset,
    TopicPartitionKey,
    Upsert,
)
from relay.postgres.engine import Database, driver_message, is_transient
from relay.postgres.mirror_bulk import BulkWriter, forget_staging_tables
from relay.postgres.mirror_freshness import store_heartbeats
from relay.postgres.mirror_refusals import dead_letter_row, record_fault, refusal_reason
from relay.postgres.mirror_statements import TableStatements
from relay.postgres.schema import mirror_dead_letters
from relay.runtime.secrets import mask_text

_SELECT_OFFSETS = sa.text(
    "SELECT topic, partition, next_offset, topic_id, topic_partitions FROM mirror_offsets "
    "WHERE consumer_group = :group AND topic = ANY(:topics)"
)
# A batch without a topic identity (the core's tests) neither checks nor records one.
_CAS = sa.text(
    "UPDATE mirror_offsets SET next_offset = :next, updated_at = now(), "
    "topic_id = coalesce(CAST(:topic_id AS text), topic_id), "
    "topic_partitions = coalesce(CAST(:partitions AS integer), topic_partitions) "
    "WHERE consumer_group = :group AND topic = :topic AND partition = :partition "
    "AND next_offset = :expected "
    "AND (topic_id IS NULL OR CAST(:topic_id AS text) IS NULL OR topic_id = :topic_id)"
)
_FIRST = sa.text(
    "INSERT INTO mirror_offsets "
    "(consumer_group, topic, partition, next_offset, topic_id, topic_partitions) "
    "VALUES (:group, :topic, :partition, :next, :topic_id, :partitions) "
    "ON CONFLICT DO NOTHING"
)
log = logging.getLogger(__name__)

_INSERT_DEAD = postgresql.insert(mirror_dead_letters).on_conflict_do_nothing(
    index_elements=["consumer_group", "topic", "partition", "offset"]
)


class PostgresMirrorStore:
    """Implements :class:`relay.mirroring.ports.MirrorStore` for one consumer group."""

    def __init__(
        self,
        database: Database,
        group: str,
        tables: Sequence[ResolvedTable],
        reflected: Mapping[str, sa.Table],
    ) -> None:
        self._database = database
        self._group = group
        self._statements = {t.table: TableStatements(t, reflected[t.table]) for t in tables}
        self._bulk = BulkWriter(tables, reflected, self.run_operations)
        self._bulk_warned = False
        self._bulk_healthy = True  # no failure of the bulk path but on a record so far

    def stored_offsets(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, StoredOffset]:
        topics = sorted({topic for topic, _ in partitions})
        with (
            self._database.errors("reading mirror_offsets", retriable=True),
            self._database.engine.connect() as conn,
        ):
            rows = conn.execute(_SELECT_OFFSETS, {"group": self._group, "topics": topics}).all()
        return {
            (r.topic, r.partition): StoredOffset(int(r.next_offset), r.topic_id, r.topic_partitions)
            for r in rows
        }

    def apply(self, batch: Batch, before_commit: Callable[[], None]) -> ApplyResult:
        # Lost connections, deadlocks and serialization failures are retriable: the batch
        # was rolled back, or committed (the retry's compare-and-set tells which).
        with self._database.errors(f"applying {_named([batch])}", retriable=True):
            try:
                return self._applied([batch], before_commit, None)[0]
            except _BulkRefused as refused:  # rolled back: again, without the bulk path
                return self._applied([batch], before_commit, refused.by_record)[0]

    def apply_together(
        self, batches: Sequence[Batch], before_commit: Callable[[], None]
    ) -> list[ApplyResult] | None:
        if not self._bulk_healthy:
            return None  # one at a time: each batch finds its own way
        with self._database.errors(f"applying {_named(batches)}", retriable=True):
            try:
                return self._applied(batches, before_commit, None)
            except _BulkRefused:
                return None

    def _applied(
        self, batches: Sequence[Batch], before_commit: Callable[[], None], by_record: bool | None
    ) -> list[ApplyResult]:
        """One transaction of ``batches`` (their offset rows locked in partition order, so
        that two instances never wait for each other's); ``by_record`` (one batch) after
        the bulk path failed on a record (True) or otherwise (False)."""
        with self._database.engine.connect() as conn:
            try:
                with conn.begin():
                    for batch in sorted(batches, key=lambda b: (b.topic, b.partition)):
                        self._advance(conn, batch)
                        store_heartbeats(
                            conn, self._group, batch.topic, batch.partition, batch.items
                        )
                    if by_record is None and self._bulk_healthy:
                        written = self._in_bulk(conn, batches)
                    else:
                        (batch,) = batches
                        written = [self._write(conn, batch, by_record)]
                    dead = [d for _, found in written for d in found]
                    if dead:
                        conn.execute(_INSERT_DEAD, [dead_letter_row(self._group, d) for d in dead])
                    before_commit()
            except BaseException:
                forget_staging_tables(conn)
                raise
        return [
            ApplyResult(applied, sum(1 for item in batch.items if item.skipped), tuple(found))
            for batch, (applied, found) in zip(batches, written, strict=True)
        ]

    def _in_bulk(
        self, conn: Connection, batches: Sequence[Batch]
    ) -> list[tuple[int, list[DeadLetter]]]:
        """The row operations of ``batches``, in their order, as the bulk statements apply
        them, without a savepoint (it cost two round trips a batch): when they fail, the
        whole transaction rolls back (_BulkRefused)."""
        written: list[tuple[int, list[DeadLetter]]] = []
        ops: list[Op] = []
        for batch in batches:
            dead = [DeadLetter(i.record, i.error) for i in batch.items if i.error is not None]
            with_ops = [item for item in batch.items if item.ops]
            ops.extend(op for item in with_ops for op in item.ops)
            written.append((len(with_ops), dead))
        if ops:
            try:
                self._bulk.apply(conn, ops)
            except DBAPIError as exc:
                raise _BulkRefused(self._bulk_failed(exc, batches[0])) from exc
        return written

    def _advance(self, conn: Connection, batch: Batch) -> None:
        params = {
            "group": self._group,
            "topic": batch.topic,
            "partition": batch.partition,
            "next": batch.next_offset,
            "expected": batch.expected,
            "topic_id": None if batch.identity is None else batch.identity.topic_id,
            "partitions": None if batch.identity is None else batch.identity.partitions,
        }
        statement = _FIRST if batch.expected is None else _CAS
        if conn.execute(statement, params).rowcount != 1:
            shown = "no stored offset" if batch.expected is None else f"offset {batch.expected}"
            if batch.identity is not None:
                shown += f" of topic id {batch.identity.topic_id}"
            raise MirrorOffsetConflict(
                f"another consumer of group {self._group} moved the stored offset "
                f"(this instance expected {shown}); batch rolled back",
                batch.topic,
                batch.partition,
                batch.expected,
            )

    def _write(
        self, conn: Connection, batch: Batch, by_record: bool | None
    ) -> tuple[int, list[DeadLetter]]:
        """``batch``'s row operations after the bulk path failed: record by record
        (``by_record``), pipelined, or (None: it failed on an earlier batch, not on a
        record) in bulk inside a savepoint first."""
        items = batch.items
        dead = [DeadLetter(item.record, item.error) for item in items if item.error is not None]
        with_ops = [item for item in items if item.ops]
        ops = [op for item in with_ops for op in item.ops]
        if ops and by_record is None:
            try:
                with conn.begin_nested():
                    self._bulk.apply(conn, ops)
                return len(with_ops), dead
            except DBAPIError as exc:
                forget_staging_tables(conn)
                by_record = self._bulk_failed(exc, batch)
        if not by_record:
            try:
                with conn.begin_nested():
                    self.run_operations(conn, ops)
                return len(with_ops), dead
            except DBAPIError as exc:
                if record_fault(exc) is None:
                    raise
        applied = 0
        for item in with_ops:  # one savepoint per record: the good ones still apply
            try:
                with conn.begin_nested():
                    self.run_operations(conn, item.ops)
                applied += 1
            except DBAPIError as exc:
                fault = record_fault(exc)
                if fault is None:
                    raise
                reason = refusal_reason(exc)
                if fault == "may heal":
                    if batch.waited is None:
                        raise RecordMayHealError(
                            f"offset {item.record.offset}: {reason}; it may be accepted later"
                        ) from None
                    reason += f" (after {batch.waited} attempts)"
                dead.append(DeadLetter(item.record, reason))
        dead.sort(key=lambda d: d.record.offset)
        return applied, dead

    def _bulk_failed(self, exc: DBAPIError, batch: Batch) -> bool:
        """After the bulk statements failed: True when a record caused it; raises what the
        batch cannot survive (a lost connection, a serialization failure: retriable); else
        logs it once (the pipelined statements take over; later batches try the bulk path
        inside a savepoint) and returns False."""
        if record_fault(exc) is not None:
            return True
        if is_transient(exc):
            raise exc
        self._bulk_healthy = False
        if not self._bulk_warned:
            self._bulk_warned = True
            log.warning(
                "%s[%d]: applying in bulk failed (%s); applying this batch and any such "
                "later one record by record",
                batch.topic,
                batch.partition,
                mask_text(driver_message(exc).first_line),
            )
        return False

    def run_operations(self, conn: Connection, ops: Sequence[Op]) -> None:
        """Consecutive operations of one kind on one table go as one executemany, in
        record order (psycopg pipelines them); a key may repeat within a run."""
        for (_, table, guarded), run in groupby(ops, key=_run_key):
            self._statements[table].run(conn, list(run), guarded)


def _named(batches: Sequence[Batch]) -> str:
    return ", ".join(tp_text((batch.topic, batch.partition)) for batch in batches)


class _BulkRefused(Exception):
    """The bulk statements failed and the batch's transaction rolled back: ``by_record``
    when a record caused it (found record by record), else the pipelined statements."""

    def __init__(self, by_record: bool) -> None:
        super().__init__("the bulk statements failed")
        self.by_record = by_record


def _run_key(op: Op) -> tuple[str, str, bool]:
    if isinstance(op, Upsert):
        return ("upsert", op.table, False)
    if isinstance(op, Append):
        return ("append", op.table, False)
    return ("delete", op.table, op.version is not None)
