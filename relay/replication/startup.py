"""A replicated partition's start-up, at its first batch and again after a failed
transaction: fence the earlier copiers of the partition (take the target partition's
transactional id over), read the position committed on the target, check it
(:mod:`relay.replication.position_check`) and seek the source there."""

from __future__ import annotations

import logging

from relay.replication.ports import ReplicaWriter, SourceReader, TopicIds
from relay.replication.position_check import checked_start_read_again
from relay.replication.types import Origin, PositionStamp, Route
from relay.runtime.clock import Clock

log = logging.getLogger("relay.replication.partition_replicator")  # where it always logged

READY = "ready, earlier copiers of this partition fenced"
"""A route's start-up line once it holds it; relay.chaos.logwatch looks for it."""


def fenced_start(
    route: Route,
    reader: SourceReader,
    writer: ReplicaWriter,
    *,
    origin: Origin,
    owner: PositionStamp,
    ids: TopicIds,
    clock: Clock,
) -> tuple[int, PositionStamp]:
    """Fence, then the offset to copy from (the source seeked there) and the stamp to
    commit with: the committed position checked against its stamp, the source's end and
    the target's last copy (ReplicaPositionError when it cannot be trusted). ``owner``:
    this replicator's cluster id and prefix; ``ids``: both topics' ids, described after
    the fence."""
    committed = writer.fence()
    now = clock.monotonic()
    mine = described_stamp(
        origin, route, ids, now, cluster_id=owner.cluster_id, prefix=owner.prefix
    )
    next_offset, stamp = checked_start_read_again(
        route,
        committed,
        mine,
        writer.last_copy,
        reader.end_offset(),
        read_again=writer.position,
    )
    reader.seek(next_offset)
    log.info(
        "%s: %s; copying from offset %d",
        route,
        READY,
        next_offset,
        extra={"topic": route.topic, "partition": route.partition, "offset": next_offset},
    )
    return next_offset, stamp


def described_stamp(
    origin: Origin,
    route: Route,
    ids: TopicIds,
    now: float,
    *,
    cluster_id: str | None,
    prefix: str | None,
) -> PositionStamp:
    """The stamp of a replicator with the source cluster's ``cluster_id`` and ``prefix``,
    with both topics' ids as described at or after ``now`` (after the fence)."""
    return PositionStamp(
        origin,
        cluster_id,
        ids.source(route.topic, now),
        ids.target(route.target_topic, now),
        prefix,
    )
