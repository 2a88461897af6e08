"""`relay mirror`'s metrics: the LoopObserver of its consume loop."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial

from prometheus_client import Counter
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from relay.runtime.health import State
from relay.runtime.metrics.base import (
    QUERY_EVERY_S,
    Latencies,
    ProcessMetrics,
    Sampled,
    TopicPartition,
)

MIRROR_CONSUMER = "mirror consumer"
RecordTimes = Callable[[Mapping[TopicPartition, int | None]], Mapping[TopicPartition, int | None]]
"""The Kafka timestamp (ms) of the first record at or after each stored offset (None: no
record before the end; left out: unknown): KafkaRecordStream.record_times."""


class MirrorMetrics(ProcessMetrics):
    """`relay mirror`'s metrics and readiness: the LoopObserver of its consume loop."""

    def _declare(self) -> None:
        counter = partial(Counter, registry=self.registry, labelnames=["topic", "partition"])
        self._applied = counter(
            "relay_mirror_records_applied", "Records applied to the mirrored tables"
        )
        self._dead_letters = counter(
            "relay_mirror_dead_letters", "Records moved to mirror_dead_letters"
        )
        self._retries = Counter(
            "relay_mirror_retries",
            "Database calls that failed and are tried again, and batches waiting for a record "
            "to heal",
            registry=self.registry,
        )
        self._unmapped = Counter(
            "relay_mirror_unmapped_fields",
            "Records of a schema registry format with a field no column of the table reads "
            "(applied without it; the log says the ALTER TABLE to run, once per field)",
            labelnames=["table", "field"],
            registry=self.registry,
        )
        self._stored: dict[TopicPartition, int | None] = {}  # owned partitions' next offsets
        self._stable: Sampled[TopicPartition, int] = Sampled(
            "reading the last stable offsets", self._clock
        )
        self._complete: Sampled[str, float] = Sampled("reading relay_mirror_freshness", self._clock)
        # Keyed by partition and stored offset: a partition that moved is asked at once.
        self._oldest: Sampled[tuple[TopicPartition, int | None], int | None] = Sampled(
            "reading the oldest records not applied", self._clock
        )
        self._latency = Latencies(
            "relay_mirror_apply_latency_seconds",
            "Per record of a committed batch: the database commit's time minus the record's "
            "Kafka timestamp",
        )

    def started(
        self,
        stable: Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]] | None,
        record_times: RecordTimes | None = None,
    ) -> None:
        """The start-up checks passed and the consumer runs. ``stable`` answers the last
        stable offsets for the lag, ``record_times`` the age of the oldest record not
        applied for the lag in seconds (both asked at scrape time); None: no lag."""
        self._stable.use(stable)
        if record_times is not None:
            self._oldest.use(partial(_times_at, record_times))
        self.readiness.checked([MIRROR_CONSUMER])
        self.readiness.set(MIRROR_CONSUMER, State.RUNNING)

    def stopped(self) -> None:
        self.readiness.set(MIRROR_CONSUMER, State.STOPPED)
        self._stable.use(None)
        self._complete.use(None)
        self._oldest.use(None)

    def freshness(self, query: Callable[[Sequence[str]], Mapping[str, float]] | None) -> None:
        """``query`` answers, for the group it is given, each mirrored table's
        complete-through time (seconds since the epoch; tables not known left out), asked
        at scrape time; None: none."""
        self._complete.use(query)

    # -- LoopObserver (relay.mirroring.observer) --------------------------------------

    def positioned(self, offsets: Mapping[TopicPartition, int | None]) -> None:
        with self._lock:
            self._stored.update(offsets)
        for topic, partition in offsets:
            self._applied.labels(topic, str(partition))
            self._dead_letters.labels(topic, str(partition))

    def revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Another member of the group applies ``partitions`` now: their series go."""
        with self._lock:
            for tp in partitions:
                self._stored.pop(tp, None)
        for topic, partition in partitions:
            self._applied.remove(topic, str(partition))
            self._dead_letters.remove(topic, str(partition))

    def applied(
        self,
        tp: TopicPartition,
        records: int,
        dead_letters: int,
        next_offset: int,
        event_times_ms: Sequence[int] = (),
    ) -> None:
        self._latency.observe(self._wall(), event_times_ms)
        with self._lock:
            if tp in self._stored:
                self._stored[tp] = next_offset
        self._applied.labels(tp[0], str(tp[1])).inc(records)
        self._dead_letters.labels(tp[0], str(tp[1])).inc(dead_letters)
        self.readiness.set(MIRROR_CONSUMER, State.RUNNING)

    def unmapped_field(self, table: str, field: str) -> None:
        self._unmapped.labels(table, field).inc()

    def retrying(self) -> None:
        self._retries.inc()
        self.readiness.set(MIRROR_CONSUMER, State.RETRYING)

    def resumed(self) -> None:
        self.readiness.set(MIRROR_CONSUMER, State.RUNNING)

    def collect(self) -> Iterator[Metric]:
        yield from super().collect()
        lag = GaugeMetricFamily(
            "relay_mirror_lag_records",
            "Last stable offset minus the stored offset, per owned partition (the last "
            f"stable offsets asked at most every {QUERY_EVERY_S:g} s)",
            labels=["topic", "partition"],
        )
        with self._lock:
            stored = dict(self._stored)
        stable = self._stable.get(stored.keys())
        for tp in sorted(stored.keys() & stable.keys()):
            lag.add_metric([tp[0], str(tp[1])], max(0, stable[tp] - (stored[tp] or 0)))
        yield lag
        yield self._lag_seconds(stored, stable)
        yield self._latency.family()
        complete = GaugeMetricFamily(
            "relay_mirror_complete_through_timestamp_seconds",
            "Every outbox event committed before this time is applied to the table "
            "(relay_mirror_freshness; tables not known yet are left out; asked at most "
            f"every {QUERY_EVERY_S:g} s)",
            labels=["table"],
        )
        for table, through in sorted(self._complete.get(["tables"]).items()):
            complete.add_metric([table], through)
        yield complete

    def _lag_seconds(
        self, stored: Mapping[TopicPartition, int | None], stable: Mapping[TopicPartition, int]
    ) -> Metric:
        seconds = GaugeMetricFamily(
            "relay_mirror_lag_seconds",
            "How old the oldest record not yet applied is (now minus its Kafka timestamp), "
            f"0 when caught up, per owned partition (asked at most every {QUERY_EVERY_S:g} s)",
            labels=["topic", "partition"],
        )
        owned = sorted(stored.keys() & stable.keys())
        lagging = [(tp, stored[tp]) for tp in owned if stable[tp] > (stored[tp] or 0)]
        oldest = self._oldest.get(lagging) if lagging else {}
        now = self._wall()
        for tp in owned:
            key = (tp, stored[tp])
            if key not in lagging or key in oldest:
                ms = oldest.get(key) if key in lagging else None
                age = 0.0 if ms is None else max(0.0, now - ms / 1000)
                seconds.add_metric([tp[0], str(tp[1])], age)
        return seconds


def _times_at(
    record_times: RecordTimes, keys: Sequence[tuple[TopicPartition, int | None]]
) -> dict[tuple[TopicPartition, int | None], int | None]:
    """``record_times`` asked about (partition, stored offset) keys."""
    found = record_times(dict(keys))
    return {(tp, at): found[tp] for tp, at in keys if tp in found}
