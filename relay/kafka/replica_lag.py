"""What `relay replicate --lag` reads, taking nothing over: the selected routes, the
replicator's positions on the target (read_committed, as any reader of the group's
offsets), the source partitions' last stable offsets and the timestamp of the first
record each lagging partition has not copied yet."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaException, TopicPartition

from relay.errors import KafkaError
from relay.kafka.errors import translate
from relay.kafka.record_stream import KafkaRecordStream
from relay.kafka.replica_reader import last_stable_offsets
from relay.kafka.replica_topics import TopicPlanner
from relay.kafka.replica_writer import target_positions_consumer
from relay.replication.types import NO_POSITION, PositionStamp, ReplicaPosition, Route
from relay.settings.replicate import ReplicateSettings

Partition = tuple[str, int]


def routes(settings: ReplicateSettings) -> list[tuple[Route, bool]]:
    """Every selected source partition, and whether its target partition exists."""
    return TopicPlanner(settings).routes()


def positions(settings: ReplicateSettings, routes: Sequence[Route]) -> dict[Route, ReplicaPosition]:
    """The position of each route (whose target partition exists) committed on the target
    for the replicator's group; a pending transactional one is waited for."""
    if not routes:
        return {}
    consumer = target_positions_consumer(settings)
    wanted = [TopicPartition(r.target_topic, r.partition) for r in routes]
    try:
        found = consumer.committed(wanted, timeout=settings.target.request_timeout_s)
    except KafkaException as exc:
        raise translate(exc, "reading the replicator's positions on the target") from None
    finally:
        consumer.close()
    by_partition = {(tp.topic, tp.partition): tp for tp in found}
    result = {}
    for route in routes:
        tp = by_partition[(route.target_topic, route.partition)]
        if tp.error is not None:
            raise KafkaError(
                f"reading the position of {route.target_topic}[{route.partition}] on the "
                f"target failed: {tp.error.str()}"
            )
        result[route] = (
            NO_POSITION
            if tp.offset < 0
            else ReplicaPosition(tp.offset, PositionStamp.from_text(tp.metadata))
        )
    return result


def source_ends(
    settings: ReplicateSettings, partitions: Sequence[Partition]
) -> dict[Partition, int]:
    """Each source partition's last stable offset now."""
    return last_stable_offsets(settings, partitions) if partitions else {}


def first_record_times(
    settings: ReplicateSettings, starts: Mapping[Partition, int]
) -> dict[Partition, int | None]:
    """The timestamp (ms) of the first committed source record at or after each start
    offset (None: none before the end); a start no longer in the log is left out."""
    if not starts:
        return {}
    stream = KafkaRecordStream(settings.source, f"{settings.group}.lag")
    try:
        return stream.record_times(dict(starts))
    finally:
        stream.close()
