"""Draining a replicated partition: copy every committed record below an end offset (the
source's last stable offset when the run began), then return (`relay replicate --once`,
the Spark job's tasks), with the position committed again when nothing was copied."""

from __future__ import annotations

import threading
from typing import Protocol

from relay.replication.types import ReplicaBatch, ReplicaResult, Route


class Drained(Protocol):
    """What a drain needs of
    :class:`~relay.replication.partition_replicator.PartitionReplicator`."""

    route: Route

    @property
    def next_offset(self) -> int: ...

    def started(self) -> bool: ...

    def start_retrying(self, stop: threading.Event | None = None) -> int | None: ...

    def copy_batch(
        self, up_to: int | None = None, wait_s: float = 0.0, stop: threading.Event | None = None
    ) -> ReplicaBatch | None: ...

    def read_past(self, offset: int) -> bool: ...

    def keep_alive_if_due(self, every_s: float) -> bool: ...


def drain(
    replicator: Drained, end_offset: int, wait_s: float, stop: threading.Event | None
) -> ReplicaResult:
    """Copy every committed record of ``replicator``'s partition below ``end_offset``
    (started first, unless it is), waiting ``wait_s`` at most for each read."""
    route = replicator.route
    if not replicator.started() and replicator.start_retrying(stop) is None:
        return ReplicaResult(route.topic, route.partition, route.target_topic, 0, 0, 0)
    records = batches = 0
    while replicator.next_offset < end_offset and not (stop is not None and stop.is_set()):
        batch = replicator.copy_batch(end_offset, wait_s, stop)
        if batch is not None:
            records += batch.records
            batches += 1
        elif replicator.read_past(end_offset):
            break  # what is left below it: aborted records and transaction markers
    if batches == 0:
        replicator.keep_alive_if_due(0.0)  # an idle partition of a scheduled run
    return ReplicaResult(
        route.topic, route.partition, route.target_topic, records, batches, replicator.next_offset
    )
