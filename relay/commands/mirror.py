"""The mirror as a typed API: start-up checks, continuous and ``--once`` runs, Spark tasks
and the lag report.

Start-up fails fast with one clear error (I6): unreachable database or broker, schema
not migrated, a mapping that does not match the database, a mapped topic missing in
Kafka. All three runners build the same core (:class:`~relay.mirroring.loop.MirrorLoop`
over :class:`~relay.mirroring.applier.Applier`) on the same edges.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.errors import ConfigurationError, KafkaError
from relay.kafka.admin import admin_client, check_broker, topic_partitions
from relay.kafka.record_stream import KafkaRecordStream
from relay.mirroring.applier import Applier
from relay.mirroring.loop import LoopObserver, MirrorLoop
from relay.mirroring.mapping import MirrorMapping, load_mapping
from relay.mirroring.types import MirrorSummary, PartitionStats, ResolvedTable, TopicPartitionKey
from relay.postgres.engine import database_errors, make_engine
from relay.postgres.migrations import check_schema
from relay.postgres.mirror_catalog import resolve_tables
from relay.postgres.mirror_store import PostgresMirrorStore, group_offsets
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.failpoints import Failpoints
from relay.runtime.metrics import MirrorMetrics
from relay.runtime.retry import RetryPolicy
from relay.settings.mirror import MirrorSettings

if TYPE_CHECKING:  # commands use the PostgreSQL adapter's engines, never SQLAlchemy itself
    import sqlalchemy as sa
    from sqlalchemy import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the start-up checks established."""

    mapping: MirrorMapping
    tables: tuple[ResolvedTable, ...]
    reflected: dict[str, sa.Table]
    partitions: tuple[TopicPartitionKey, ...]


@dataclass(frozen=True, slots=True)
class LagRow:
    topic: str
    partition: int
    next_offset: int | None  # None: nothing applied yet
    last_stable_offset: int

    @property
    def lag(self) -> int:
        """Records (and transaction markers) committed in Kafka but not yet applied."""
        return max(0, self.last_stable_offset - (self.next_offset or 0))


def _engine(settings: MirrorSettings, *, pooled: bool = True) -> Engine:
    return make_engine(
        settings.relay.database_url,
        application_name="relay-mirror",
        idle_transaction_timeout_s=settings.idle_transaction_timeout_s,
        pooled=pooled,
    )


def prepare(settings: MirrorSettings, engine: Engine) -> Prepared:
    url = settings.relay.database_url
    with database_errors(url, "connecting"), engine.connect():
        pass
    check_schema(engine, url)
    mapping = load_mapping(settings.mapping_path)
    if settings.topics:
        mapping = mapping.restricted_to(settings.topics)
    tables, reflected = resolve_tables(engine, url, mapping)
    return Prepared(mapping, tables, reflected, kafka_partitions(settings, mapping))


def kafka_partitions(
    settings: MirrorSettings, mapping: MirrorMapping
) -> tuple[TopicPartitionKey, ...]:
    kafka = settings.relay.kafka
    admin = admin_client(kafka)
    check_broker(admin, kafka)
    partitions: list[TopicPartitionKey] = []
    for topic in mapping.topics:
        count = topic_partitions(admin, topic, kafka.request_timeout_s)
        if count is None:
            tables = ", ".join(t.table for t in mapping.tables_for(topic))
            raise ConfigurationError(
                f"topic {topic} (mapped to {tables} in {mapping.source}) does not exist in Kafka"
            )
        partitions.extend((topic, p) for p in range(count))
    return tuple(partitions)


def targets_for(
    engine: Engine,
    settings: MirrorSettings,
    stream: KafkaRecordStream,
    partitions: Sequence[TopicPartitionKey],
) -> dict[TopicPartitionKey, int]:
    """The last stable offset of each partition: what ``--once`` and the Spark job apply
    up to. A stored offset never passes the last stable offset of its time, so one read
    before it that is past it means the topic was recreated or truncated: an error."""
    stored = group_offsets(engine, settings.relay.database_url, settings.group)
    stable = stream.last_stable_offsets(partitions)
    for tp in partitions:
        check_not_past_end(tp, stored.get(tp), stable[tp])
    return stable


def check_not_past_end(tp: TopicPartitionKey, stored: int | None, stable: int) -> None:
    """A stored offset past the last stable offset: the topic was recreated or truncated."""
    if stored is not None and stored > stable:
        raise KafkaError(
            f"{tp[0]}[{tp[1]}]: the stored offset {stored} is past the end of the "
            f"partition ({stable}): the topic was recreated or truncated. Set "
            "mirror_offsets.next_offset for it (or delete the row to start from the "
            "beginning)"
        )


def _loop(
    settings: MirrorSettings,
    engine: Engine,
    tables: Sequence[ResolvedTable],
    reflected: Mapping[str, sa.Table],
    *,
    targets: dict[TopicPartitionKey, int] | None,
    retry: RetryPolicy,
    clock: Clock,
    observer: LoopObserver | None = None,
) -> MirrorLoop:
    store = PostgresMirrorStore(
        engine, settings.relay.database_url, settings.group, tables, reflected
    )
    return MirrorLoop(
        Applier(tables, store, Failpoints.from_env()),
        store,
        batch_size=settings.batch_size,
        max_wait_s=settings.max_wait_s,
        record_retries=settings.record_retries,
        targets=targets,
        retry=retry,
        clock=clock,
        observer=observer,
    )


class MirrorService:
    """``relay mirror``: continuously in the consumer group, or ``once`` up to the last
    stable offsets of every mapped partition as of the start."""

    def __init__(
        self,
        settings: MirrorSettings,
        *,
        clock: Clock | None = None,
        metrics: MirrorMetrics | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock or SystemClock()
        self.stop_event = threading.Event()
        self.metrics = metrics or MirrorMetrics()

    def run(self, once: bool) -> MirrorSummary:
        engine = _engine(self._settings)
        stream = stable = None
        try:
            prepared = prepare(self._settings, engine)
            stream = KafkaRecordStream(self._settings.relay.kafka, self._settings.group)
            if self._settings.relay.metrics_port is not None:  # the lag's, asked at scrape time
                stable = KafkaRecordStream(self._settings.relay.kafka, self._settings.group)
            targets = (
                targets_for(engine, self._settings, stream, prepared.partitions) if once else None
            )
            loop = _loop(
                self._settings,
                engine,
                prepared.tables,
                prepared.reflected,
                targets=targets,
                retry=RetryPolicy() if once else RetryPolicy(max_attempts=None),
                clock=self._clock,
                observer=self.metrics,
            )
            if targets is not None:
                log.info("mirroring %d partitions up to their last stable offsets", len(targets))
                stream.assign(prepared.partitions, loop)
            else:
                log.info(
                    "mirroring %s continuously as group %s",
                    ", ".join(prepared.mapping.topics),
                    self._settings.group,
                )
                stream.subscribe(prepared.mapping.topics, loop)
            self.metrics.started(None if stable is None else stable.last_stable_offsets)
            return loop.run(stream, self.stop_event)
        finally:
            self.metrics.stopped()
            for consumer in (stream, stable):
                if consumer is not None:
                    consumer.close()
            engine.dispose()


def mirror_partition(
    settings: MirrorSettings, topic: str, partition: int, target: int
) -> PartitionStats:
    """Apply one partition from its stored offset up to ``target`` (a Spark task).

    The task reads the stored offset itself, after it starts: a re-run or speculative
    copy of the task continues from what the other attempt committed, and their
    compare-and-sets keep them from applying anything twice."""
    engine = _engine(settings, pooled=False)
    stream = None
    try:
        mapping = load_mapping(settings.mapping_path).restricted_to((topic,))
        tables, reflected = resolve_tables(engine, settings.relay.database_url, mapping)
        tp = (topic, partition)
        loop = _loop(
            settings,
            engine,
            tables,
            reflected,
            targets={tp: target},
            retry=RetryPolicy(),
            clock=SystemClock(),
        )
        stream = KafkaRecordStream(settings.relay.kafka, settings.group)
        stream.assign([tp], loop)
        summary = loop.run(stream)
        return summary.partitions[0]
    finally:
        if stream is not None:
            stream.close()
        engine.dispose()


def lag_report(settings: MirrorSettings) -> list[LagRow]:
    """Stored offsets of the group against the brokers' last stable offsets."""
    engine = _engine(settings, pooled=False)
    stream = None
    try:
        partitions = prepare(settings, engine).partitions
        stored = group_offsets(engine, settings.relay.database_url, settings.group)
        stream = KafkaRecordStream(settings.relay.kafka, settings.group)
        stable = stream.last_stable_offsets(partitions)
    finally:
        if stream is not None:
            stream.close()
        engine.dispose()
    return [LagRow(t, p, stored.get((t, p)), stable[(t, p)]) for t, p in partitions]


def plan_mirror_job(settings: MirrorSettings) -> list[tuple[str, int, int]]:
    """(topic, partition, last stable offset) of every partition with work to do: the
    tasks of the mirror's Spark job. A stored offset past the end is an error."""
    rows = lag_report(settings)
    for row in rows:
        check_not_past_end((row.topic, row.partition), row.next_offset, row.last_stable_offset)
    return [(row.topic, row.partition, row.last_stable_offset) for row in rows if row.lag > 0]
