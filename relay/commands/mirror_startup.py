"""The mirror's start-up checks (I6), shared by ``relay mirror``, ``--once``, ``--lag``
and the Spark job: the database reachable and migrated, the mapping resolved against the
tables, every mapped topic in Kafka, the group's stored offsets fitting the topics (a
recreated or truncated topic is refused before anything of it is applied)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.errors import ConfigurationError, KafkaError
from relay.kafka.admin import admin_client, check_broker, describe_topics
from relay.kafka.record_stream import KafkaRecordStream
from relay.mirroring.mapping import MirrorMapping, load_mapping
from relay.mirroring.topic_guard import check_stored, offset_versioned
from relay.mirroring.types import ResolvedTable, StoredOffset, TopicIdentity, TopicPartitionKey
from relay.postgres import mirror_freshness as freshness
from relay.postgres.engine import Database, open_database
from relay.postgres.migrations import check_schema
from relay.postgres.mirror_catalog import resolve_tables
from relay.postgres.mirror_offsets import group_offsets
from relay.settings.mirror import MirrorSettings

if TYPE_CHECKING:  # commands use the PostgreSQL adapter's handle, never SQLAlchemy itself
    import sqlalchemy as sa


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the start-up checks established."""

    mapping: MirrorMapping
    tables: tuple[ResolvedTable, ...]
    reflected: dict[str, sa.Table]
    partitions: tuple[TopicPartitionKey, ...]
    identities: dict[str, TopicIdentity]  # each mapped topic as Kafka has it


def mirror_database(settings: MirrorSettings, *, pooled: bool = True) -> Database:
    return open_database(
        settings.connections.database_url,
        application_name="relay-mirror",
        idle_transaction_timeout_s=settings.idle_transaction_timeout_s,
        pooled=pooled,
        # No ping per checkout (a round trip a batch, a tenth of its time): every call of
        # the mirror is tried again after a broken connection, a RetriableError.
        pre_ping=False,
    )


def prepare(settings: MirrorSettings, database: Database) -> Prepared:
    with database.connect("connecting"):
        pass
    check_schema(database)
    full = mapping = load_mapping(settings.mapping_path)
    if settings.topics:
        mapping = mapping.restricted_to(settings.topics)
    tables, reflected = resolve_tables(database, mapping)
    # Every topic of each table, also those other instances mirror (the freshness view).
    freshness.record_table_topics(database, settings.group, full.tables)
    identities = kafka_topics(settings, mapping)
    partitions = tuple((t, p) for t, i in identities.items() for p in range(i.partitions))
    return Prepared(mapping, tables, reflected, partitions, identities)


def kafka_topics(settings: MirrorSettings, mapping: MirrorMapping) -> dict[str, TopicIdentity]:
    """The id and partition count of each mapped topic, in mapping order."""
    kafka = settings.connections.kafka
    admin = admin_client(kafka)
    check_broker(admin, kafka)
    found = describe_topics(admin, mapping.topics, kafka.request_timeout_s)
    identities: dict[str, TopicIdentity] = {}
    for topic in mapping.topics:
        identity = found[topic]
        if identity is None:
            tables = ", ".join(t.table for t in mapping.tables_for(topic))
            raise ConfigurationError(
                f"topic {topic} (mapped to {tables} in {mapping.source}) does not exist in Kafka"
            )
        identities[topic] = identity
    return identities


def check_topics(
    settings: MirrorSettings, prepared: Prepared, stored: Mapping[TopicPartitionKey, StoredOffset]
) -> None:
    """The group's stored offsets against the mapped topics (TopicGuard's checks)."""
    for topic, identity in prepared.identities.items():
        rows = {p: s for (t, p), s in stored.items() if t == topic}
        tables = offset_versioned(prepared.tables, topic)
        check_stored(settings.group, topic, identity, rows, tables)


def targets_for(
    database: Database, settings: MirrorSettings, stream: KafkaRecordStream, prepared: Prepared
) -> dict[TopicPartitionKey, int]:
    """The last stable offset of each partition: what ``--once`` and the Spark job apply
    up to. A stored offset of another topic id is refused; one of this topic never passes
    the last stable offset of its time, so one read before it that is past it means the
    topic was truncated: an error."""
    stored = group_offsets(database, settings.group)
    check_topics(settings, prepared, stored)
    stable = stream.last_stable_offsets(prepared.partitions)
    for tp in prepared.partitions:
        check_not_past_end(tp, stored_next(stored, tp), stable[tp])
    return stable


def stored_next(
    stored: Mapping[TopicPartitionKey, StoredOffset], tp: TopicPartitionKey
) -> int | None:
    return stored[tp].next_offset if tp in stored else None


def check_not_past_end(tp: TopicPartitionKey, stored: int | None, stable: int) -> None:
    """A stored offset past the last stable offset: the topic was recreated or truncated."""
    if stored is not None and stored > stable:
        raise KafkaError(
            f"{tp[0]}[{tp[1]}]: the stored offset {stored} is past the end of the "
            f"partition ({stable}): the topic was recreated or truncated. Set "
            "mirror_offsets.next_offset for it (or delete the row to start from the "
            "beginning)"
        )
