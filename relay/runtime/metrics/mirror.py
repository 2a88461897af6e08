"""`relay mirror`'s metrics: the LoopObserver of its consume loop."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial

from prometheus_client import Counter
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from relay.runtime.health import State
from relay.runtime.metrics.base import QUERY_EVERY_S, ProcessMetrics, Sampled, TopicPartition

MIRROR_CONSUMER = "mirror consumer"


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
        self._stored: dict[TopicPartition, int | None] = {}  # owned partitions' next offsets
        self._stable: Sampled[TopicPartition, int] = Sampled(
            "reading the last stable offsets", self._clock
        )
        self._complete: Sampled[str, float] = Sampled("reading relay_mirror_freshness", self._clock)

    def started(
        self, stable: Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]] | None
    ) -> None:
        """The start-up checks passed and the consumer runs. ``stable`` answers the last
        stable offsets for the lag (asked at scrape time); None: no lag."""
        self._stable.use(stable)
        self.readiness.checked([MIRROR_CONSUMER])
        self.readiness.set(MIRROR_CONSUMER, State.RUNNING)

    def stopped(self) -> None:
        self.readiness.set(MIRROR_CONSUMER, State.STOPPED)
        self._stable.use(None)
        self._complete.use(None)

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
        with self._lock:
            for tp in partitions:
                self._stored.pop(tp, None)

    def applied(
        self, tp: TopicPartition, records: int, dead_letters: int, next_offset: int
    ) -> None:
        with self._lock:
            if tp in self._stored:
                self._stored[tp] = next_offset
        self._applied.labels(tp[0], str(tp[1])).inc(records)
        self._dead_letters.labels(tp[0], str(tp[1])).inc(dead_letters)
        self.readiness.set(MIRROR_CONSUMER, State.RUNNING)

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
