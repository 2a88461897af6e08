"""Applying one batch of one Kafka partition: decode, then one database transaction.

Order of one batch::

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

from collections.abc import Sequence
from dataclasses import replace

from relay.mirroring.decode import decode
from relay.mirroring.ports import MirrorStore
from relay.mirroring.types import ApplyResult, Batch, KafkaRecord, ResolvedTable, TopicIdentity
from relay.runtime import tracing
from relay.runtime.failpoints import FailpointHook, Failpoints


class Applier:
    def __init__(
        self,
        tables: Sequence[ResolvedTable],
        store: MirrorStore,
        failpoints: FailpointHook | None = None,
    ) -> None:
        self._store = store
        self._failpoints = failpoints or Failpoints()
        by_topic: dict[str, list[ResolvedTable]] = {}
        for table in tables:
            for topic in table.mapping.topics:
                by_topic.setdefault(topic, []).append(table)
        self._by_topic = {topic: tuple(found) for topic, found in by_topic.items()}

    def batch(
        self,
        topic: str,
        partition: int,
        expected: int | None,
        next_offset: int,
        records: Sequence[KafkaRecord],
        *,
        identity: TopicIdentity | None = None,
    ) -> Batch:
        tables = self._by_topic.get(topic, ())
        items = tuple(decode(record, tables) for record in records)
        return Batch(topic, partition, expected, next_offset, items, identity=identity)

    def apply(self, batch: Batch) -> ApplyResult:
        """Apply ``batch`` exactly once or raise (MirrorOffsetConflict, RetriableError,
        DatabaseError) with nothing applied."""
        partition = batch.partition
        self._failpoints.hit("mirror_before_apply", partition)
        spans = tracing.start_apply_spans(
            tracing.Applied(r.topic, r.partition, r.offset, r.headers)
            for r in (item.record for item in batch.items)
            if tracing.has_trace(r.headers)
        )
        try:
            result = self._store.apply(
                batch, before_commit=lambda: self._failpoints.hit("mirror_after_apply", partition)
            )
        except Exception as exc:
            spans.end(f"not applied: {exc}")
            raise
        spans.end(failed={dead.record.offset: dead.error for dead in result.dead_letters})
        self._failpoints.hit("mirror_after_commit", partition)
        skipped = tuple(
            (item.record.offset, item.skipped_tombstone)
            for item in batch.items
            if item.skipped_tombstone is not None
        )
        return replace(result, skipped_tombstones=skipped) if skipped else result
