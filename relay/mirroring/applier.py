"""Applying a batch of one Kafka partition, or the batches of several together: decode,
then one database transaction.

Order of one batch (of batches applied together: each failpoint for each partition)::

    decode records (pure)  ->  [mirror_before_apply]  ->  BEGIN
    ->  stored offset: expected -> next (compare-and-set; 0 rows = another consumer won)
    ->  upserts / deletes (version-guarded), dead letters  ->  [mirror_after_apply]
    ->  COMMIT  ->  [mirror_after_commit]

Each record that carries a W3C ``traceparent`` gets an ``apply`` span, a child of it, from
BEGIN to COMMIT (:mod:`relay.runtime.tracing`).

The offset moves only in the transaction that writes the rows, and only from the value
this instance read; so a crash at any point, a zombie that lost its partition or a
duplicate Spark task can neither skip nor apply a record twice (I4, docs/invariants.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from relay.mirroring.decode import TopicDecoder
from relay.mirroring.ports import MirrorStore, ValueDecoder
from relay.mirroring.types import ApplyResult, Batch, KafkaRecord, ResolvedTable, TopicIdentity
from relay.runtime import tracing
from relay.runtime.failpoints import FailpointHook, Failpoints

log = logging.getLogger(__name__)


class Applier:
    def __init__(
        self,
        tables: Sequence[ResolvedTable],
        store: MirrorStore,
        failpoints: FailpointHook | None = None,
        decoder: ValueDecoder | None = None,
        on_unmapped: Callable[[str, str], None] | None = None,
    ) -> None:
        self._store = store
        self._on_unmapped = on_unmapped  # a metric: (table, field) of each such record
        self._reported: set[tuple[str, str]] = set()
        self._failpoints = failpoints or Failpoints()
        by_topic: dict[str, list[ResolvedTable]] = {}
        for table in tables:
            for topic in table.mapping.topics:
                by_topic.setdefault(topic, []).append(table)
        self._by_topic = {topic: TopicDecoder(found, decoder) for topic, found in by_topic.items()}
        self._no_tables = TopicDecoder((), decoder)

    def batch(  # raises RetriableError when the schema registry cannot be reached
        self,
        topic: str,
        partition: int,
        expected: int | None,
        next_offset: int,
        records: Sequence[KafkaRecord],
        *,
        identity: TopicIdentity | None = None,
    ) -> Batch:
        decode = self._by_topic.get(topic, self._no_tables).decode
        items = tuple(map(decode, records))
        for item in items:
            for table, field, alter in item.unmapped:
                self._unmapped(table, field, alter)
        return Batch(topic, partition, expected, next_offset, items, identity=identity)

    def _unmapped(self, table: str, field: str, alter: str) -> None:
        """A field added upstream that no column reads: counted each time, logged once."""
        if self._on_unmapped is not None:
            self._on_unmapped(table, field)
        if (table, field) not in self._reported:
            self._reported.add((table, field))
            log.warning(
                "%s: field %r of the records has no column; rows are applied without it."
                " To keep it: %s; then map it in the table's [tables.columns] (reported once)",
                table,
                field,
                alter,
            )

    def apply(self, batch: Batch) -> ApplyResult:
        """Apply ``batch`` exactly once or raise (MirrorOffsetConflict, RetriableError,
        DatabaseError) with nothing applied."""
        results = self._applying(
            [batch], lambda before_commit: [self._store.apply(batch, before_commit)]
        )
        if results is None:  # the store applies one batch whatever its records
            raise RuntimeError("a batch applied alone was refused")
        return results[0]

    def apply_together(self, batches: Sequence[Batch]) -> list[ApplyResult] | None:
        """Apply ``batches`` (of distinct partitions) in one transaction, or return None
        with nothing applied (apply them one at a time), or raise as :meth:`apply`."""
        return self._applying(
            batches, lambda before_commit: self._store.apply_together(batches, before_commit)
        )

    def _applying(
        self,
        batches: Sequence[Batch],
        store: Callable[[Callable[[], None]], list[ApplyResult] | None],
    ) -> list[ApplyResult] | None:
        """``store(before_commit)`` between the failpoints of each batch's partition, with
        the records' apply spans."""
        hit = self._failpoints.hit
        for batch in batches:
            hit("mirror_before_apply", batch.partition)
        spans = [_apply_spans(batch) for batch in batches]  # each keyed by its offsets

        def before_commit() -> None:
            for batch in batches:
                hit("mirror_after_apply", batch.partition)

        try:
            results = store(before_commit)
        except Exception as exc:
            for opened in spans:
                opened.end(f"not applied: {exc}")
            raise
        if results is None:
            for opened in spans:
                opened.end("not applied with other partitions' batches: applied alone")
            return None
        for opened, result in zip(spans, results, strict=True):
            opened.end(failed={dead.record.offset: dead.error for dead in result.dead_letters})
        for batch in batches:
            hit("mirror_after_commit", batch.partition)
        return [
            _with_skipped(batch, result) for batch, result in zip(batches, results, strict=True)
        ]


def _apply_spans(batch: Batch) -> tracing.OpenSpans:
    traced = [
        tracing.Applied(r.topic, r.partition, r.offset, r.headers)
        for r in (item.record for item in batch.items)
        if tracing.has_trace(r.headers)
    ]  # none: OpenTelemetry is not even imported
    return tracing.start_apply_spans(traced) if traced else tracing.NO_SPANS


def _with_skipped(batch: Batch, result: ApplyResult) -> ApplyResult:
    skipped = tuple(
        (item.record.offset, item.skipped_tombstone)
        for item in batch.items
        if item.skipped_tombstone is not None
    )
    return replace(result, skipped_tombstones=skipped) if skipped else result
