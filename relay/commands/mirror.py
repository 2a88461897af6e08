"""The mirror as a typed API: continuous and ``--once`` runs, Spark tasks, the lag and
freshness reports, the reset of a recreated topic.

Each starts with the checks of :mod:`relay.commands.mirror_startup` (I6). All three
runners build the same core (:class:`~relay.mirroring.loop.MirrorLoop` over
:class:`~relay.mirroring.applier.Applier`) on the same edges.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from relay.commands.groups import mirror_settings
from relay.commands.mirror_startup import (
    check_not_past_end,
    check_topics,
    mirror_database,
    prepare,
    stored_next,
    targets_for,
)
from relay.errors import ConfigurationError
from relay.kafka.admin import KafkaTopicDirectory
from relay.kafka.record_stream import KafkaRecordStream
from relay.mirroring.applier import Applier
from relay.mirroring.loop import MirrorLoop
from relay.mirroring.mapping import load_mapping
from relay.mirroring.observer import LoopObserver
from relay.mirroring.topic_guard import (
    TopicGuard,
    TopicReset,
    reset_notes,
    stale_offsets,
)
from relay.mirroring.types import (
    LagRow,
    MirrorSummary,
    PartitionStats,
    ResolvedTable,
    TopicPartitionKey,
    with_lag_seconds,
)
from relay.postgres import mirror_freshness as freshness
from relay.postgres.engine import Database
from relay.postgres.mirror_catalog import resolve_tables
from relay.postgres.mirror_offsets import group_offsets, reset_offsets, tables_with_rows
from relay.postgres.mirror_store import PostgresMirrorStore
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.failpoints import Failpoints
from relay.runtime.metrics import MirrorMetrics
from relay.runtime.retry import RetryPolicy
from relay.settings.mirror import MirrorSettings

if TYPE_CHECKING:  # commands use the PostgreSQL adapter's handle, never SQLAlchemy itself
    import sqlalchemy as sa

    from relay.kafka.schema_decoding import RegistryValueDecoder

log = logging.getLogger(__name__)


def _loop(
    settings: MirrorSettings,
    database: Database,
    tables: Sequence[ResolvedTable],
    reflected: Mapping[str, sa.Table],
    *,
    targets: dict[TopicPartitionKey, int] | None,
    retry: RetryPolicy,
    clock: Clock,
    observer: LoopObserver | None = None,
) -> MirrorLoop:
    store = PostgresMirrorStore(database, settings.group, tables, reflected)
    directory = KafkaTopicDirectory(settings.connections.kafka)
    return MirrorLoop(
        Applier(
            tables,
            store,
            Failpoints.from_env(),
            value_decoder(settings, tables),
            on_unmapped=observer.unmapped_field if isinstance(observer, MirrorMetrics) else None,
        ),
        store,
        batch_size=settings.batch_size,
        max_wait_s=settings.max_wait_s,
        record_retries=settings.record_retries,
        targets=targets,
        retry=retry,
        clock=clock,
        observer=observer,
        guard=TopicGuard(directory, settings.group, tables, clock),
        overlap=True,  # the next batch read and decoded while the database applies one
    )


def value_decoder(
    settings: MirrorSettings, tables: Sequence[ResolvedTable]
) -> RegistryValueDecoder | None:
    """The schema registry's decoder when a table's ``format`` needs one; a
    ConfigurationError when none is configured."""
    needing = [t.table for t in tables if t.mapping.value_format != "json"]
    if not needing:
        return None
    if settings.registry is None:
        raise ConfigurationError(
            f"table {needing[0]} has a schema registry format: set RELAY_SCHEMA_REGISTRY_URL"
            " (or --schema-registry-url)"
        )
    from relay.kafka.schema_decoding import registry_decoder  # confluent's registry extra

    return registry_decoder(settings.registry)


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
        database = mirror_database(self._settings)
        stream = stable = None
        try:
            settings = mirror_settings(self._settings, database)
            prepared = prepare(settings, database)
            stream = KafkaRecordStream(settings.connections.kafka, settings.group)
            if settings.metrics_port is not None:  # the lag's, asked at scrape time
                stable = KafkaRecordStream(settings.connections.kafka, settings.group)
            targets = targets_for(database, settings, stream, prepared) if once else None
            loop = _loop(
                settings,
                database,
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
                    settings.group,
                )
                stream.subscribe(prepared.mapping.topics, loop)
            if stable is None:
                self.metrics.started(None)
            else:
                self.metrics.started(stable.last_stable_offsets, stable.record_times)
            group = settings.group
            self.metrics.freshness(partial(freshness.complete_through, database, group))
            return loop.run(stream, self.stop_event)
        finally:
            self.metrics.stopped()
            for consumer in (stream, stable):
                if consumer is not None:
                    consumer.close()
            database.dispose()


def mirror_partition(
    settings: MirrorSettings, topic: str, partition: int, target: int
) -> PartitionStats:
    """Apply one partition from its stored offset up to ``target`` (a Spark task).

    The task reads the stored offset itself, after it starts: a re-run or speculative
    copy of the task continues from what the other attempt committed, and their
    compare-and-sets keep them from applying anything twice."""
    database = mirror_database(settings, pooled=False)
    stream = None
    try:
        settings = mirror_settings(settings, database, announce=False)  # the driver's
        mapping = load_mapping(settings.mapping_path).restricted_to((topic,))
        tables, reflected = resolve_tables(database, mapping)
        tp = (topic, partition)
        loop = _loop(
            settings,
            database,
            tables,
            reflected,
            targets={tp: target},
            retry=RetryPolicy(),
            clock=SystemClock(),
        )
        stream = KafkaRecordStream(settings.connections.kafka, settings.group)
        stream.assign([tp], loop)
        summary = loop.run(stream)
        return summary.partitions[0]
    finally:
        if stream is not None:
            stream.close()
        database.dispose()


def timed(stream: KafkaRecordStream, rows: Sequence[LagRow]) -> list[LagRow]:
    """``rows`` with their lag in seconds: the Kafka timestamp of the first record at or
    after each lagging partition's stored offset, read with ``stream`` (a consumer of its
    own), against this host's clock."""
    lagging = {(r.topic, r.partition): r.next_offset for r in rows if r.lag > 0}
    return with_lag_seconds(rows, stream.record_times(lagging) if lagging else {}, time.time())


def lag_report(
    settings: MirrorSettings, *, checked: bool = False, seconds: bool = False
) -> list[LagRow]:
    """Stored offsets of the group against the brokers' last stable offsets; ``checked``:
    refuse stored offsets that do not fit the topics (TopicGuard's checks); ``seconds``:
    with the lag in seconds (a read of each lagging partition)."""
    database = mirror_database(settings, pooled=False)
    stream = None
    try:
        settings = mirror_settings(settings, database)
        prepared = prepare(settings, database)
        stored = group_offsets(database, settings.group)
        if checked:
            check_topics(settings, prepared, stored)
        stream = KafkaRecordStream(settings.connections.kafka, settings.group)
        stable = stream.last_stable_offsets(prepared.partitions)
        rows = [
            LagRow(t, p, stored_next(stored, (t, p)), stable[(t, p)])
            for t, p in prepared.partitions
        ]
        return timed(stream, rows) if seconds else rows
    finally:
        if stream is not None:
            stream.close()
        database.dispose()


def table_freshness(settings: MirrorSettings) -> list[freshness.Freshness]:
    """How complete each mirrored table of the group is (``relay_mirror_freshness``)."""
    database = mirror_database(settings, pooled=False)
    try:
        settings = mirror_settings(settings, database)
        return freshness.group_freshness(database, settings.group)
    finally:
        database.dispose()


def plan_mirror_job(settings: MirrorSettings) -> list[tuple[str, int, int]]:
    """(topic, partition, last stable offset) of every partition with work to do: the
    tasks of the mirror's Spark job. A stored offset of another topic id, or past the
    end, is an error."""
    rows = lag_report(settings, checked=True)
    for row in rows:
        check_not_past_end((row.topic, row.partition), row.next_offset, row.last_stable_offset)
    return [(row.topic, row.partition, row.last_stable_offset) for row in rows if row.lag > 0]


def reset_recreated_topic(settings: MirrorSettings, topic: str, *, yes: bool) -> TopicReset:
    """Make the group apply ``topic`` from offset 0 of its current topic id: with ``yes``,
    move the stored offsets of other ids (or of none) there in one transaction; without,
    only say which. Refused (nothing changed) when a table the topic feeds takes its
    versions from Kafka offsets and holds rows."""
    database = mirror_database(settings, pooled=False)
    try:
        settings = mirror_settings(settings, database)
        prepared = prepare(settings, database)
        identity = prepared.identities.get(topic)
        if identity is None:
            raise ConfigurationError(
                f"topic {topic} is not mapped in {prepared.mapping.source}: nothing to reset"
            )
        stale = stale_offsets(topic, identity, group_offsets(database, settings.group))
        tables = [t for t in prepared.tables if topic in t.mapping.topics]
        filled = tables_with_rows(database, {t.table: prepared.reflected[t.table] for t in tables})
        notes = reset_notes(topic, tables, filled) if stale else ()
        if stale and yes:
            moved = [(s.partition, s.stored) for s in stale]
            reset_offsets(database, settings.group, topic=topic, identity=identity, stale=moved)
            log.info(
                "group %s: %d offsets of %s reset to topic id %s",
                settings.group,
                len(stale),
                topic,
                identity.topic_id,
            )
        return TopicReset(
            topic, identity, stale, notes, done=yes and bool(stale), group=settings.group
        )
    finally:
        database.dispose()
