"""The metrics observers that also count a run's :class:`~relay.runtime.progress.Progress`.

`relay run --once` and `relay mirror --once` hand one of these to the command API in place
of the plain metrics: the cores and relay.commands stay as they are, and the progress
sees the same events the metrics see (``RelayObserver``, ``LoopObserver``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from relay.errors import RelayError
from relay.runtime.clock import Clock
from relay.runtime.metrics import (
    Backlog,
    MirrorMetrics,
    OutboxMetrics,
    RecordTimes,
    ReplicaMetrics,
    TopicPartition,
)
from relay.runtime.progress import Progress

log = logging.getLogger(__name__)


class OutboxProgressMetrics(OutboxMetrics):
    """`relay run`'s metrics, and ``progress``: the total is each relay partition's
    pending rows when it starts (``relay status``'s query, asked once per partition as it
    starts, before its first batch), the rows done are those published and dead-lettered."""

    def __init__(self, progress: Progress, *, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self.progress = progress
        self._pending: Callable[[Mapping[int, int]], Mapping[int, Backlog]] | None = None
        self._counted: set[int] = set()

    def expect(
        self,
        partitions: Iterable[int],
        backlog: Callable[[Mapping[int, int]], Mapping[int, Backlog]],
        *,
        shared: bool = False,
    ) -> None:
        super().expect(partitions, backlog, shared=shared)
        self._pending = backlog
        self.progress.restart()

    def running(self, partition: int, position: int) -> None:
        super().running(partition, position)
        with self._lock:
            first = partition not in self._counted
            self._counted.add(partition)
        if first and self._pending is not None:
            try:
                found = self._pending({partition: position})
            except RelayError as exc:  # the progress goes without a total; the run goes on
                log.warning("progress: reading the pending rows failed: %s", exc)
                return
            self.progress.add_total(sum(b.pending for b in found.values()))

    def published(
        self, partition: int, records: int, seconds: float, event_times_ms: Sequence[int] = ()
    ) -> None:
        super().published(partition, records, seconds, event_times_ms)
        self.progress.advance(records)

    def dead_lettered(self, partition: int, rows: int) -> None:
        super().dead_lettered(partition, rows)
        self.progress.advance(0, dead_letters=rows)


class MirrorProgressMetrics(MirrorMetrics):
    """`relay mirror`'s metrics, and ``progress``: records applied and dead-lettered (no
    total: the loop's observer is not told the offsets it applies up to)."""

    def __init__(self, progress: Progress, *, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self.progress = progress

    def started(
        self,
        stable: Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]] | None,
        record_times: RecordTimes | None = None,
    ) -> None:
        super().started(stable, record_times)
        self.progress.restart()

    def applied(
        self,
        tp: TopicPartition,
        records: int,
        dead_letters: int,
        next_offset: int,
        event_times_ms: Sequence[int] = (),
    ) -> None:
        super().applied(tp, records, dead_letters, next_offset, event_times_ms)
        self.progress.advance(records, dead_letters=dead_letters)


class ReplicaProgressMetrics(ReplicaMetrics):
    """`relay replicate`'s metrics, and ``progress`` in source offsets: the total is each
    source partition's offsets between its position and the run's end, the offsets done
    are those its position moved past. Transaction markers and aborted records take
    offsets without a copy, so counting records alone never reached the total; the
    records copied and the offsets skipped are told apart here."""

    def __init__(self, progress: Progress, *, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self.progress = progress
        self._offsets: dict[tuple[str, int], int] = {}  # the furthest next offset seen
        self.records_copied = 0
        self.offsets_done = 0

    @property
    def offsets_skipped(self) -> int:
        """Offsets passed without a copy: commit markers, records of aborted transactions."""
        return max(0, self.offsets_done - self.records_copied)

    def to_copy(self, topic: str, partition: int, records: int) -> None:
        self.progress.add_total(records)

    def running(self, topic: str, partition: int, next_offset: int) -> None:
        super().running(topic, partition, next_offset)
        with self._lock:
            last = self._offsets.setdefault((topic, partition), next_offset)
            moved = max(0, next_offset - last)
            self._offsets[(topic, partition)] = max(last, next_offset)
            self.offsets_done += moved
        if moved:
            self.progress.advance(moved)

    def copied(
        self,
        topic: str,
        partition: int,
        records: int,
        seconds: float,
        event_times_ms: Sequence[int] = (),
    ) -> None:
        super().copied(topic, partition, records, seconds, event_times_ms)
        with self._lock:
            self.records_copied += records
