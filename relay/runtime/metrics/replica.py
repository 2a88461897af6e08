"""`relay replicate`'s metrics: the ReplicaObserver of its source partitions."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial

from prometheus_client import Counter, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from relay.runtime.health import State
from relay.runtime.metrics.base import (
    BATCH_BUCKETS_S,
    QUERY_EVERY_S,
    Latencies,
    ProcessMetrics,
    Sampled,
    TopicPartition,
)


def component(topic: str, partition: int) -> str:
    """A source partition's name in ``/readyz``."""
    return f"{topic}[{partition}]"


class ReplicaMetrics(ProcessMetrics):
    """Records copied, retries, the batch durations, and the lag of each source partition
    (its last stable offset minus the position, asked at scrape time); ready while every
    source partition copies."""

    def _declare(self) -> None:
        counter = partial(Counter, registry=self.registry, labelnames=["topic", "partition"])
        self._copied = counter(
            "relay_replicate_records_copied", "Source records copied to the target cluster"
        )
        self._retries = counter(
            "relay_replicate_retries", "Batches and start-ups that failed and are tried again"
        )
        self._duration = Histogram(
            "relay_replicate_batch_seconds",
            "From the read of a batch to its target commit",
            registry=self.registry,
            buckets=BATCH_BUCKETS_S,
        )
        # MirrorMaker 2's replication-latency-ms and record-age-ms, as histograms.
        self._latency = Latencies(
            "relay_replicate_latency_seconds",
            "Per copied record: the target transaction's commit time minus the record's "
            "source timestamp",
        )
        self._age = Latencies(
            "relay_replicate_record_age_seconds",
            "Per copied record: its age (from its source timestamp) when its batch was read",
        )
        group = partial(Counter, registry=self.registry, labelnames=["group"])
        self._synced = group(
            "relay_replicate_group_offsets_synced",
            "--sync-groups: offsets committed for a consumer group on the target cluster",
        )
        self._sync_skipped = group(
            "relay_replicate_group_sync_skipped",
            "--sync-groups: sync rounds that left a group alone: it had active members on "
            "the target cluster",
        )
        # By group: when the last round that synced every partition began to read, when
        # the round under way began, and how many partitions the last round left waiting.
        self._last_sync: dict[str, float] = {}
        self._round_began: dict[str, float] = {}
        self._sync_waiting: dict[str, int] = {}
        self._positions: dict[TopicPartition, int] = {}
        self._through: dict[TopicPartition, int] = {}  # complete through, ms since the epoch
        self._stable: Sampled[TopicPartition, int] = Sampled(
            "reading the source's last stable offsets", self._clock
        )

    def started(
        self, stable: Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]] | None
    ) -> None:
        """The topics are planned. ``stable`` answers the source's last stable offsets for
        the lag (asked at scrape time); None: no lag."""
        self._stable.use(stable)
        self.readiness.checked([])

    def expect(self, topic: str, partition: int) -> None:
        """A source partition this process copies from now on: ready once it runs."""
        self._copied.labels(topic, str(partition))
        self._retries.labels(topic, str(partition))
        self.readiness.set(component(topic, partition), State.STARTING)

    def to_copy(self, topic: str, partition: int, records: int) -> None:
        """A run meant to finish (``--once``) has about ``records`` offsets to copy in this
        partition (a progress display counts them; the metrics do not)."""

    def running(self, topic: str, partition: int, next_offset: int) -> None:
        with self._lock:
            self._positions[(topic, partition)] = next_offset
        self.readiness.set(component(topic, partition), State.RUNNING)

    def copied(
        self,
        topic: str,
        partition: int,
        records: int,
        seconds: float,
        event_times_ms: Sequence[int] = (),
    ) -> None:
        self._copied.labels(topic, str(partition)).inc(records)
        self._duration.observe(seconds)
        committed = self._wall()
        self._latency.observe(committed, event_times_ms)
        self._age.observe(committed - seconds, event_times_ms)

    def retrying(self, topic: str, partition: int) -> None:
        self._retries.labels(topic, str(partition)).inc()
        self.readiness.set(component(topic, partition), State.RETRYING)

    def complete_through(self, topic: str, partition: int, as_of_ms: int) -> None:
        with self._lock:
            tp = (topic, partition)
            self._through[tp] = max(as_of_ms, self._through.get(tp, as_of_ms))

    def stopped(self, topic: str, partition: int) -> None:
        self.readiness.set(component(topic, partition), State.STOPPED)

    def released(self, topic: str, partition: int) -> None:
        """Another instance of the members group copies this source partition now (or
        will): it no longer counts for readiness, and its lag goes."""
        self.readiness.forget(component(topic, partition))
        with self._lock:
            self._positions.pop((topic, partition), None)

    def syncing(self, groups: Sequence[str]) -> None:
        """``--sync-groups``: their age counts from now until their first round."""
        now = self._wall()
        with self._lock:
            for each in groups:
                self._synced.labels(each)
                self._sync_skipped.labels(each)
                self._last_sync.setdefault(each, now)

    def group_sync_began(self, group: str) -> None:
        """A round of ``group`` begins to read its offsets."""
        with self._lock:
            self._round_began[group] = self._wall()

    def group_synced(self, group: str, offsets: int, waiting: int = 0) -> None:
        """The round of ``group`` ended, committing ``offsets`` offsets on the target and
        leaving ``waiting`` partitions as they were: not replicated up to the group's
        offset yet. Only a round that left none waiting makes the group's sync age young
        again, counted from when it began to read."""
        self._synced.labels(group).inc(offsets)
        with self._lock:
            began = self._round_began.pop(group, None)
            self._sync_waiting[group] = waiting
            if waiting == 0 and began is not None:
                self._last_sync[group] = began

    def group_sync_skipped(self, group: str) -> None:
        """A round left ``group`` alone: it has active members on the target."""
        self._sync_skipped.labels(group).inc()

    def collect(self) -> Iterator[Metric]:
        yield from super().collect()
        age = GaugeMetricFamily(
            "relay_replicate_group_sync_age_seconds",
            "--sync-groups: seconds since the last sync round that synced every partition "
            "the group consumed began (since the start before the first)",
            labels=["group"],
        )
        waiting = GaugeMetricFamily(
            "relay_replicate_group_sync_waiting_partitions",
            "--sync-groups: partitions the group's last sync round left as they were: not "
            "replicated up to the group's offset yet",
            labels=["group"],
        )
        with self._lock:
            synced, left = dict(self._last_sync), dict(self._sync_waiting)
        now = self._wall()
        for each in sorted(synced):
            age.add_metric([each], max(0.0, now - synced[each]))
            waiting.add_metric([each], left.get(each, 0))
        yield age
        yield waiting
        lag = GaugeMetricFamily(
            "relay_replicate_lag_records",
            "The source partition's last stable offset minus the position on the target "
            f"(asked at most every {QUERY_EVERY_S:g} s; markers and aborted records count)",
            labels=["topic", "partition"],
        )
        with self._lock:
            positions = dict(self._positions)
        stable = self._stable.get(positions.keys())
        for tp in sorted(positions.keys() & stable.keys()):
            lag.add_metric([tp[0], str(tp[1])], max(0, stable[tp] - positions[tp]))
        yield lag
        yield from self._freshness()
        yield self._latency.family()
        yield self._age.family()

    def _freshness(self) -> Iterator[Metric]:
        """Each source partition's complete-through time (relay.replication.freshness) and
        this host's clock minus it: a lag in seconds that stays fresh on an idle source."""
        through = GaugeMetricFamily(
            "relay_replicate_complete_through_timestamp_seconds",
            "Every record a read_committed consumer of the source partition could see at "
            "this time (seconds since the epoch) is copied (--heartbeat-interval)",
            labels=["topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "relay_replicate_lag_seconds",
            "This host's clock minus relay_replicate_complete_through_timestamp_seconds",
            labels=["topic", "partition"],
        )
        with self._lock:
            found = dict(self._through)
        now = self._wall()
        for (topic, partition), as_of_ms in sorted(found.items()):
            through.add_metric([topic, str(partition)], as_of_ms / 1000)
            lag.add_metric([topic, str(partition)], max(0.0, now - as_of_ms / 1000))
        yield through
        yield lag
