"""The consume loop: buffers records per Kafka partition and applies them in batches.

Both ``relay mirror`` (continuous, group subscription or ``--once``, manual assignment)
and each Spark task of ``jobs/mirror.py`` run this loop. A batch of one partition is
applied when it is full, when the partition is read up to its last stable offset (once
everything the consumer has already fetched is buffered), when a continuous loop has
taken everything fetched, when nothing more arrives, or when its first record has waited
``max_wait_s``.

Where each partition starts comes only from the database (:meth:`MirrorLoop.assigned`).
When the compare-and-set of the stored offset fails, another consumer has applied the
partition since: the buffered records are dropped, the offset is read again and the
consumer seeks there. With ``targets`` (``--once`` and Spark), the loop returns once
every target partition's stored offset has reached its target (the last stable offset
when the run started); records at or past the target are left for the next run.
With a :class:`~relay.mirroring.topic_guard.TopicGuard`, the stored offsets are checked
against the topics on assignment, and each batch before it is applied. Calls to the
database, the decoder and the guard are tried again as
:class:`~relay.mirroring.attempts.Attempts` says: after transient errors, and while a
record may heal. With ``overlap`` a batch is applied on a thread of its own while the
next is read and decoded, one at a time and in order (:mod:`relay.mirroring.apply_lane`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from functools import partial

from relay.errors import MirrorOffsetConflict, OffsetOutOfRangeError
from relay.mirroring.applier import Applier
from relay.mirroring.apply_lane import ApplyLane, Part
from relay.mirroring.attempts import Attempts, Outcome
from relay.mirroring.cursors import PartitionCursor
from relay.mirroring.observer import LoopObserver, Unobserved
from relay.mirroring.ports import MirrorStore, RecordStream
from relay.mirroring.reporting import log_assigned, log_batch, log_progress, log_revoked, tp_text
from relay.mirroring.topic_checks import TopicChecks
from relay.mirroring.topic_guard import TopicGuard
from relay.mirroring.types import (
    ApplyResult,
    Batch,
    KafkaRecord,
    MirrorSummary,
    PartitionEnd,
    PartitionStats,
    TopicPartitionKey,
)
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.retry import RetryPolicy
from relay.runtime.summary import RunSummary

log = logging.getLogger(__name__)


class MirrorLoop:
    """Implements :class:`relay.mirroring.ports.AssignmentListener` for the consumer edge."""

    def __init__(
        self,
        applier: Applier,
        store: MirrorStore,
        *,
        batch_size: int = 2000,
        max_wait_s: float = 0.5,
        targets: Mapping[TopicPartitionKey, int] | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        progress_every_s: float = 30.0,
        record_retries: int = 10,
        observer: LoopObserver | None = None,
        guard: TopicGuard | None = None,
        overlap: bool = False,
    ) -> None:
        self._applier = applier
        self._store = store
        self._batch_size = batch_size
        self._max_wait_s = max_wait_s
        self._targets = dict(targets) if targets is not None else None
        self._clock = clock or SystemClock()
        self._progress_every_s = progress_every_s
        self._observer = observer or Unobserved()
        self._topics = TopicChecks(guard)
        self._cursors: dict[TopicPartitionKey, PartitionCursor] = {}
        self._stats: dict[TopicPartitionKey, PartitionStats] = {}
        self._stream: RecordStream | None = None
        self._stop = threading.Event()
        self._attempts = Attempts(
            retry or RetryPolicy(), self._clock, self._stop, self._observer, record_retries
        )
        self._overlap = overlap
        self._lane: ApplyLane[PartitionCursor] = ApplyLane(overlap=False)

    # -- assignment (called by the consumer edge) -------------------------------------

    def assigned(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> Mapping[TopicPartitionKey, int | None]:
        self._settle()
        stored = self._attempts.retried(
            lambda: self._store.stored_offsets(partitions), "reading offsets"
        )
        identities = self._topics.assigned(self._attempts, partitions, stored)
        starts: dict[TopicPartitionKey, int | None] = {}
        for tp in partitions:
            offset = stored[tp].next_offset if tp in stored else None
            target = self._targets.get(tp) if self._targets is not None else None
            identity = identities.get(tp[0])
            self._cursors[tp] = PartitionCursor(tp[0], tp[1], offset, offset or 0, target, identity)
            stats = self._stats.setdefault(tp, PartitionStats(tp[0], tp[1]))
            stats.next_offset = offset
            starts[tp] = offset
        self._observer.positioned(starts)
        log_assigned(log, starts)
        return starts

    def revoked(self, partitions: Sequence[TopicPartitionKey]) -> None:
        self._settle()
        dropped = 0
        for tp in partitions:
            cursor = self._cursors.pop(tp, None)
            if cursor is not None:
                dropped += len(cursor.buffer)
        self._observer.revoked(partitions)
        log_revoked(log, partitions, dropped)

    # -- the loop ---------------------------------------------------------------------

    def run(self, stream: RecordStream, stop: threading.Event | None = None) -> MirrorSummary:
        self._stream = stream
        self._stop = stop or threading.Event()
        self._attempts = self._attempts.until(self._stop)
        self._lane = ApplyLane(self._overlap)
        try:
            self._run(stream)
        finally:
            self._lane.close()
            self._lane = ApplyLane(overlap=False)
        return self.summary()

    def _run(self, stream: RecordStream) -> None:
        poll_timeout = min(0.2, self._max_wait_s)
        next_progress = self._clock.monotonic() + self._progress_every_s
        while not self._stop.is_set() and not self.finished():
            try:
                ended = self._take_fetched(stream, poll_timeout)
            except OffsetOutOfRangeError as gone:
                self._explain(gone)
                raise
            now = self._clock.monotonic()
            if ended is None:
                self._flush(*self._cursors.values())
                self._settle()  # nothing else to do meanwhile
            else:  # a cursor is None when revoked meanwhile
                self._flush(*filter(None, map(self._cursors.get, ended)))
            self._flush_waiting(now)
            if self._lane.done():
                self._settle()
            if self._targets is None and now >= next_progress:
                stored = {tp: cursor.stored for tp, cursor in self._cursors.items()}
                log_progress(log, stream, stored, self.summary())
                next_progress = now + self._progress_every_s
        if not self.finished():  # stopping: what is buffered is still ours to apply
            self._flush(*self._cursors.values())
        self._settle()

    def finished(self) -> bool:
        """With targets: every target partition is applied up to its target."""
        if self._targets is None:
            return False
        return all(tp in self._cursors and self._cursors[tp].done() for tp in self._targets)

    def summary(self) -> MirrorSummary:
        return RunSummary(tuple(self._stats[tp] for tp in sorted(self._stats)))

    def _take_fetched(
        self, stream: RecordStream, timeout: float
    ) -> dict[TopicPartitionKey, None] | None:
        """Buffer one event (waiting up to ``timeout`` for it), then those the consumer
        has already fetched, up to ``batch_size`` events; the partitions that reached
        their end meanwhile, or None when nothing came. A partition end is acted on only
        once what was fetched with it is buffered: a mirror that fell behind finds an
        end reported after every fetch, and one batch per stale end kept it behind. A
        continuous loop that took everything fetched ends each partition with records
        buffered: librdkafka reports an end only where the last stable offset meets the
        high watermark, seldom under a steady stream of transactions."""
        event = stream.poll(timeout)
        if event is None:
            return None
        ended: dict[TopicPartitionKey, None] = {}  # in the order they ended
        taken = 0
        while event is not None:
            if isinstance(event, PartitionEnd):
                if self._on_end(event):
                    ended[(event.topic, event.partition)] = None
            else:
                self._on_record(event, self._clock.monotonic())
            taken += 1
            if taken >= self._batch_size or self._stop.is_set():
                return ended
            event = stream.poll(0)
        if self._targets is None:  # all fetched is taken: apply it, as at an end
            ended.update((tp, None) for tp, cursor in self._cursors.items() if cursor.buffer)
        return ended

    def _on_record(self, record: KafkaRecord, now: float) -> None:
        cursor = self._cursors.get((record.topic, record.partition))
        if cursor is None or record.offset < cursor.fetched:
            return  # not ours (any more), or already buffered
        if cursor.target is not None and record.offset >= cursor.target:
            if cursor.fetched < cursor.target:
                cursor.fetched = cursor.target
                self._flush(cursor)
            return
        cursor.buffer.append(record)
        cursor.fetched = record.offset + 1
        cursor.received = now
        if cursor.since is None:
            cursor.since = now
        if len(cursor.buffer) >= self._batch_size:
            self._flush(cursor)

    def _on_end(self, end: PartitionEnd) -> bool:
        """The partition is read up to ``end``; False when it is not ours."""
        cursor = self._cursors.get((end.topic, end.partition))
        if cursor is None:
            return False
        offset = end.offset if cursor.target is None else min(end.offset, cursor.target)
        cursor.fetched = max(cursor.fetched, offset)
        cursor.received = self._clock.monotonic()
        return True

    def _flush_waiting(self, now: float) -> None:
        self._flush(
            *(
                c
                for c in self._cursors.values()
                if c.since is not None and now - c.since >= self._max_wait_s
            )
        )

    def _flush(self, *cursors: PartitionCursor) -> None:
        """Hand the pending records of ``cursors`` (of distinct partitions) over to the
        lane, a batch each, to be applied together."""
        decoded = [(cursor, self._decoded(cursor)) for cursor in cursors if cursor.pending()]
        if not decoded:
            return
        restarts = [cursor.restarts for cursor, _ in decoded]
        self._settle()  # one hand-over in the lane at most: batches are applied in order
        parts: list[Part[PartitionCursor]] = []
        for (cursor, batch), before in zip(decoded, restarts, strict=True):
            if cursor.restarts != before:
                continue  # the batch before it did not store the offset it starts from: dropped
            parts.append(Part(cursor, batch, cursor.buffer, cursor.since))
            cursor.buffer, cursor.since, cursor.applying = [], None, batch.next_offset
        if not parts:
            return
        applier = self._applier
        apply = partial(
            self._attempts.applied_together,
            applier.apply_together,
            applier.apply,
            [part.batch for part in parts],
        )
        self._lane.hand_over(apply, parts)
        if not self._overlap:
            self._settle()

    def _decoded(self, cursor: PartitionCursor) -> Batch:
        """The batch of ``cursor``'s pending records (its topic checked first)."""
        self._topics.verified(self._attempts, cursor)
        return self._attempts.retried(  # a schema registry out of reach: never dead-lettered
            partial(
                self._applier.batch,
                cursor.topic,
                cursor.partition,
                cursor.base,
                cursor.fetched,
                cursor.buffer,
                identity=cursor.identity,
            ),
            f"decoding {tp_text((cursor.topic, cursor.partition))}",
        )

    def _settle(self) -> None:
        """Wait for the batches in the apply lane, and act on their outcomes
        (:mod:`relay.mirroring.apply_lane`)."""
        flight = self._lane.take()
        if flight is None:
            return
        for part in flight.parts:
            part.cursor.applying = None
        for part, outcome in zip(flight.parts, flight.outcome.result(), strict=True):
            self._settled(part, outcome)

    def _settled(
        self, part: Part[PartitionCursor], outcome: Outcome | MirrorOffsetConflict
    ) -> None:
        cursor = part.cursor
        if isinstance(outcome, MirrorOffsetConflict):
            cursor.buffer[:0] = part.records  # dropped with the rest, and counted
            self._resync(cursor, outcome)
            return
        if outcome is None:  # stopped while waiting; nothing applied, the records stay buffered
            cursor.buffer[:0] = part.records
            cursor.since = part.since if part.since is not None else cursor.since
            cursor.restarts += 1
            return
        batch, result = outcome
        cursor.expected = batch.next_offset
        tp = (cursor.topic, cursor.partition)
        self._record(tp, result, cursor.expected, [d.record.timestamp_ms or 0 for d in batch.items])

    def _record(
        self, tp: TopicPartitionKey, result: ApplyResult, next_offset: int, times: list[int]
    ) -> None:
        self._stats[tp].count(result, next_offset)
        self._observer.applied(tp, result.applied, len(result.dead_letters), next_offset, times)
        log_batch(log, tp, result, next_offset)

    def _resync(self, cursor: PartitionCursor, conflict: MirrorOffsetConflict) -> None:
        tp = (cursor.topic, cursor.partition)
        stored = self._attempts.retried(lambda: self._store.stored_offsets([tp]), "reading offsets")
        cursor.identity = self._topics.assigned(self._attempts, [tp], stored).get(tp[0])
        offset = stored[tp].next_offset if tp in stored else None
        log.warning(
            "%s: %s; dropping %d fetched records and continuing from stored offset %s",
            tp_text(tp),
            conflict,
            len(cursor.buffer),
            offset,
        )
        self._stats[tp].conflicts += 1
        self._stats[tp].next_offset = offset
        self._observer.positioned({tp: offset})
        cursor.expected, cursor.fetched, cursor.buffer, cursor.since = offset, offset or 0, [], None
        cursor.restarts += 1
        if self._stream is not None and not cursor.done():
            self._stream.seek(cursor.topic, cursor.partition, offset)

    def _explain(self, gone: OffsetOutOfRangeError) -> None:
        cursor = self._cursors.get((gone.topic, gone.partition))
        if cursor is not None:
            self._topics.explain(gone, cursor, self._clock.monotonic())
