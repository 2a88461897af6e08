"""The mirror as a typed API: start-up checks, continuous and ``--once`` runs, Spark tasks
and the lag report.

Start-up fails fast with one clear error (I5): unreachable database or broker, schema
not migrated, a mapping that does not match the database, a mapped topic missing in
Kafka. All three runners build the same core (:class:`~relay.mirror.loop.MirrorLoop`
over :class:`~relay.mirror.applier.Applier`) on the same edges.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool, QueuePool

from relay.errors import ConfigurationError, KafkaError
from relay.failpoints import Failpoints
from relay.kafka.admin import admin_client, check_broker, topic_partitions
from relay.mirror.applier import Applier
from relay.mirror.consumer import KafkaRecordStream
from relay.mirror.loop import MirrorLoop, MirrorSummary, PartitionStats
from relay.mirror.mapping import MirrorMapping, load_mapping
from relay.mirror.postgres_catalog import resolve_tables
from relay.mirror.postgres_store import PostgresMirrorStore, group_offsets
from relay.mirror.settings import MirrorSettings
from relay.mirror.types import ResolvedTable, TopicPartitionKey
from relay.postgres.database import database_errors
from relay.postgres.migrations import check_schema
from relay.timing import Clock, RetryPolicy, SystemClock

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
    updated_at: datetime | None

    @property
    def lag(self) -> int:
        """Records (and transaction markers) committed in Kafka but not yet applied."""
        return max(0, self.last_stable_offset - (self.next_offset or 0))


def make_engine(settings: MirrorSettings, *, pooled: bool = True) -> Engine:
    """An engine whose sessions PostgreSQL ends if they sit idle inside a transaction
    (a paused or hung instance must not hold the offset row lock for ever)."""
    timeout_ms = int(settings.idle_transaction_timeout_s * 1000)
    return create_engine(
        settings.relay.database_url.reveal(),
        poolclass=QueuePool if pooled else NullPool,
        pool_pre_ping=True,
        connect_args={
            "connect_timeout": 10,
            "application_name": "relay-mirror",
            "options": f"-c idle_in_transaction_session_timeout={timeout_ms}",
        },
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
    stored = {
        (topic, partition): offset
        for topic, partition, offset, _ in group_offsets(
            engine, settings.relay.database_url, settings.group
        )
    }
    stable = stream.last_stable_offsets(partitions)
    for tp in partitions:
        if stored.get(tp, 0) > stable[tp]:
            raise KafkaError(
                f"{tp[0]}[{tp[1]}]: the stored offset {stored[tp]} is past the end of the "
                f"partition ({stable[tp]}): the topic was recreated or truncated. Set "
                "mirror_offsets.next_offset for it (or delete the row to start from the "
                "beginning)"
            )
    return stable


def _loop(
    settings: MirrorSettings,
    engine: Engine,
    prepared: Prepared,
    *,
    targets: dict[TopicPartitionKey, int] | None,
    retry: RetryPolicy,
    clock: Clock,
) -> MirrorLoop:
    store = PostgresMirrorStore(
        engine, settings.relay.database_url, settings.group, prepared.tables, prepared.reflected
    )
    return MirrorLoop(
        Applier(prepared.tables, store, Failpoints.from_env()),
        store,
        batch_size=settings.batch_size,
        max_wait_s=settings.max_wait_s,
        targets=targets,
        retry=retry,
        clock=clock,
    )


class MirrorService:
    """``relay mirror``: continuously in the consumer group, or ``once`` up to the last
    stable offsets of every mapped partition as of the start."""

    def __init__(self, settings: MirrorSettings, *, clock: Clock | None = None) -> None:
        self._settings = settings
        self._clock = clock or SystemClock()
        self.stop_event = threading.Event()

    def run(self, once: bool) -> MirrorSummary:
        engine = make_engine(self._settings)
        stream = None
        try:
            prepared = prepare(self._settings, engine)
            stream = KafkaRecordStream(self._settings.relay.kafka, self._settings.group)
            if once:
                targets = targets_for(engine, self._settings, stream, prepared.partitions)
                loop = _loop(
                    self._settings,
                    engine,
                    prepared,
                    targets=targets,
                    retry=RetryPolicy(),
                    clock=self._clock,
                )
                log.info("mirroring %d partitions up to their last stable offsets", len(targets))
                stream.assign(prepared.partitions, loop)
            else:
                loop = _loop(
                    self._settings,
                    engine,
                    prepared,
                    targets=None,
                    retry=RetryPolicy(max_attempts=None),
                    clock=self._clock,
                )
                log.info(
                    "mirroring %s continuously as group %s",
                    ", ".join(prepared.mapping.topics),
                    self._settings.group,
                )
                stream.subscribe(prepared.mapping.topics, loop)
            return loop.run(stream, self.stop_event)
        finally:
            if stream is not None:
                stream.close()
            engine.dispose()


def mirror_partition(
    settings: MirrorSettings, topic: str, partition: int, target: int
) -> PartitionStats:
    """Apply one partition from its stored offset up to ``target`` (a Spark task).

    The task reads the stored offset itself, after it starts: a re-run or speculative
    copy of the task continues from what the other attempt committed, and their
    compare-and-sets keep them from applying anything twice."""
    engine = make_engine(settings, pooled=False)
    stream = None
    try:
        url = settings.relay.database_url
        mapping = load_mapping(settings.mapping_path)
        if settings.topics:
            mapping = mapping.restricted_to(settings.topics)
        tables, reflected = resolve_tables(engine, url, mapping.restricted_to((topic,)))
        prepared = Prepared(mapping, tables, reflected, ((topic, partition),))
        tp = (topic, partition)
        loop = _loop(
            settings,
            engine,
            prepared,
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


def lag_report(
    settings: MirrorSettings, partitions: Sequence[TopicPartitionKey] | None = None
) -> list[LagRow]:
    """Stored offsets of the group against the brokers' last stable offsets."""
    engine = make_engine(settings, pooled=False)
    stream = None
    try:
        if partitions is None:
            partitions = prepare(settings, engine).partitions
        stored = {
            (t, p): (offset, at)
            for t, p, offset, at in group_offsets(
                engine, settings.relay.database_url, settings.group
            )
        }
        stream = KafkaRecordStream(settings.relay.kafka, settings.group)
        stable = stream.last_stable_offsets(partitions)
    finally:
        if stream is not None:
            stream.close()
        engine.dispose()
    rows = []
    for tp in partitions:
        offset, at = stored.get(tp, (None, None))
        rows.append(LagRow(tp[0], tp[1], offset, stable[tp], at))
    return rows
