"""`relay run`'s metrics: the RelayObserver of its relay partitions."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import NamedTuple

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from relay.runtime.health import State
from relay.runtime.metrics.base import (
    BATCH_BUCKETS_S,
    QUERY_EVERY_S,
    Latencies,
    ProcessMetrics,
    Sampled,
)


class Backlog(NamedTuple):
    """A relay partition as the database sees it."""

    pending: int  # rows above the partition's position
    dead_letters: int  # rows in outbox_dead_letters
    oldest_pending_age_s: float | None = None  # None: nothing pending


class OutboxMetrics(ProcessMetrics):
    """`relay run`'s metrics and readiness: the RelayObserver of its relay partitions."""

    def _declare(self) -> None:
        counter = partial(Counter, registry=self.registry, labelnames=["partition"])
        self._published = counter(
            "relay_outbox_records_published", "Outbox rows published (committed in Kafka)"
        )
        self._committed = counter(
            "relay_outbox_transactions_committed",
            "Kafka transactions committed: batches, and keep-alives of an idle position",
        )
        self._aborted = counter("relay_outbox_transactions_aborted", "Kafka transactions aborted")
        self._fenced = counter(
            "relay_outbox_fencings", "Relay partitions fenced: another relay instance took over"
        )
        self._retries = counter(
            "relay_outbox_retries", "Batches and start-ups that failed and are tried again"
        )
        self._dead_letters = counter(
            "relay_outbox_dead_letters", "Outbox rows Kafka refused, moved to outbox_dead_letters"
        )
        self._position = Gauge(
            "relay_outbox_position",
            "The position committed in Kafka: the last published seq",
            registry=self.registry,
            labelnames=["partition"],
        )
        self._duration = Histogram(
            "relay_outbox_batch_duration_seconds",
            "One batch: fetching its rows, sending them and committing the Kafka transaction",
            registry=self.registry,
            buckets=BATCH_BUCKETS_S,
        )
        self._latency = Latencies(
            "relay_outbox_publish_latency_seconds",
            "Per published event: its Kafka transaction's commit time minus the row's "
            "created_at (the writing transaction's start)",
        )
        self._counters = (
            self._published,
            self._committed,
            self._aborted,
            self._fenced,
            self._retries,
            self._dead_letters,
        )
        self._positions: dict[int, int] = {}
        self._exported: set[int] = set()  # the partitions whose series are exported
        self._range: set[int] = set()  # the relay partitions there are (as expected)
        self._fenced_here: set[int] = set()
        self._backlog: Sampled[int, Backlog] = Sampled("reading the pending rows", self._clock)

    def expect(
        self,
        partitions: Iterable[int],
        backlog: Callable[[Mapping[int, int]], Mapping[int, Backlog]],
        *,
        shared: bool = False,
    ) -> None:
        """The start-up checks passed: ``partitions`` must run to be ready (``shared``:
        only those the members group gives this process, as they start). ``backlog``
        answers per relay partition for its position (asked at scrape time). The series
        of partitions this process does not run now go (a lowered count; a sharing
        process holds none until the group gives it some)."""
        partitions = list(partitions)
        with self._lock:
            known, self._range = self._exported | self._range, set(partitions)
        for partition in known - (set() if shared else self._range):
            self._drop(partition, gone=partition not in self._range)
        names = []
        for partition in partitions:
            names.append(_partition(partition))
            if not shared:
                self._export(partition)
        self.readiness.checked(() if shared else names)
        self._backlog.use(lambda _partitions: backlog(self._known_positions()))

    def _export(self, partition: int) -> None:
        """A 0 from the start in every counter of ``partition``, for rate() and alerts."""
        with self._lock:
            if partition in self._exported:
                return
            self._exported.add(partition)
        for counter in self._counters:
            counter.labels(str(partition))

    def _drop(self, partition: int, *, gone: bool) -> None:
        """Stop exporting ``partition``'s series: another process publishes it now, or
        (``gone``) it is beyond the relay partition count. ``relay_outbox_fencings`` of a
        partition this process was fenced out of stays while the partition exists: it
        counts what happened here, whoever holds the partition now."""
        with self._lock:
            self._exported.discard(partition)
            self._positions.pop(partition, None)
            keep_fencings = partition in self._fenced_here and not gone
            if gone:
                self._fenced_here.discard(partition)
        for metric in (*self._counters, self._position):
            if metric is not self._fenced or not keep_fencings:
                metric.remove(str(partition))

    def _known_positions(self) -> dict[int, int]:
        with self._lock:
            return dict(self._positions)

    # -- RelayObserver (relay.publishing.ports) ----------------------------------------

    def running(self, partition: int, position: int) -> None:
        self._export(partition)
        with self._lock:
            self._positions[partition] = position
        self._position.labels(str(partition)).set(position)
        self.readiness.set(_partition(partition), State.RUNNING)

    def transaction(self, partition: int, committed: bool) -> None:
        (self._committed if committed else self._aborted).labels(str(partition)).inc()

    def published(
        self, partition: int, records: int, seconds: float, event_times_ms: Sequence[int] = ()
    ) -> None:
        self._published.labels(str(partition)).inc(records)
        self._duration.observe(seconds)
        self._latency.observe(self._wall(), event_times_ms)

    def retrying(self, partition: int, reason: str = "") -> None:
        self._export(partition)
        self._retries.labels(str(partition)).inc()
        self.readiness.set(_partition(partition), State.RETRYING, reason)

    def dead_lettered(self, partition: int, rows: int) -> None:
        self._dead_letters.labels(str(partition)).inc(rows)

    # -- what only relay.commands sees ------------------------------------------------

    def fenced(self, partition: int) -> None:
        with self._lock:
            self._fenced_here.add(partition)
        self._fenced.labels(str(partition)).inc()

    def stopped(self, partition: int) -> None:
        self.readiness.set(_partition(partition), State.STOPPED)

    def released(self, partition: int) -> None:
        """Another member of the group publishes ``partition`` now (or will): its series
        go (:meth:`_drop`)."""
        self.readiness.forget(_partition(partition))
        self._drop(partition, gone=False)

    def collect(self) -> Iterator[Metric]:
        yield from super().collect()
        pending = GaugeMetricFamily(
            "relay_outbox_pending_rows",
            f"Committed outbox rows above the position (asked at most every {QUERY_EVERY_S:g} s)",
            labels=["partition"],
        )
        dead = GaugeMetricFamily(
            "relay_outbox_dead_letter_rows",
            f"Rows in outbox_dead_letters (asked at most every {QUERY_EVERY_S:g} s)",
            labels=["partition"],
        )
        oldest = GaugeMetricFamily(
            "relay_outbox_oldest_pending_age_seconds",
            "The age of the oldest committed outbox row above the position, 0 when none "
            f"(asked at most every {QUERY_EVERY_S:g} s)",
            labels=["partition"],
        )
        positions = self._known_positions()
        backlog = self._backlog.get(positions)  # a last answer may name partitions gone since
        for partition in sorted(positions.keys() & backlog.keys()):
            found = backlog[partition]
            pending.add_metric([str(partition)], found.pending)
            dead.add_metric([str(partition)], found.dead_letters)
            oldest.add_metric([str(partition)], found.oldest_pending_age_s or 0.0)
        yield pending
        yield dead
        yield oldest
        yield self._latency.family()


def _partition(partition: int) -> str:
    return f"relay partition {partition}"
