"""Draining a relay partition: publish every row committed before the call, then return
(`relay run --once`, the Spark job's tasks), with a heartbeat at the end when one is due."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from relay.publishing.heartbeats import HeartbeatPlan
from relay.publishing.ports import OutboxSource
from relay.publishing.types import BatchResult, DrainResult
from relay.runtime.clock import Clock
from relay.runtime.heartbeat import Heartbeat

log = logging.getLogger(__name__)

_COUNT_CHANGE_POLL_S = 0.2
_COUNT_CHANGE_WAIT_S = 120.0


class Drained(Protocol):
    """What a drain needs of :class:`~relay.publishing.partition_relay.PartitionRelay`."""

    partition: int
    heartbeats: HeartbeatPlan

    @property
    def position(self) -> int: ...

    def publish_batch(
        self, up_to_seq: int | None = None, stop: threading.Event | None = None
    ) -> BatchResult | None: ...

    def housekeep(self) -> None: ...

    def keep_alive(self, heartbeat: Heartbeat | None = None) -> None: ...


def drain(
    relay: Drained, source: OutboxSource, clock: Clock, stop: threading.Event | None
) -> DrainResult:
    """Publish every row of ``relay``'s partition committed before this call (``relay``
    is started)."""
    partition = relay.partition
    records = batches = 0
    held_since = clock.monotonic()
    while True:
        # Rows of a previous relay partition count pending: the target stops below
        # them, and the drain goes round again once they are published.
        held = source.count_change_pending()
        target = source.high_water(partition)
        relay.heartbeats.learnt(source.settled(partition))
        while relay.position < target and not (stop is not None and stop.is_set()):
            result = relay.publish_batch(up_to_seq=target, stop=stop)
            if result is None:
                break
            records += result.records
            batches += 1
        # The floors tell the other partitions which rows below a count change's
        # barrier are published (0009_live_partition_count): record ours before waiting.
        relay.housekeep()
        if not held or not _wait_for_count_change(partition, source, clock, held_since, stop):
            break
    relay.heartbeats.committed(relay.position)
    heartbeat = relay.heartbeats.due(clock.monotonic(), relay.position)
    if heartbeat is not None or (batches == 0 and relay.position > 0):
        relay.keep_alive(heartbeat)  # an idle partition of a scheduled run keeps its position
    return DrainResult(partition, records, batches, relay.position)


def _wait_for_count_change(
    partition: int,
    source: OutboxSource,
    clock: Clock,
    since: float,
    stop: threading.Event | None,
) -> bool:
    """While rows of the previous relay partition count wait in other partitions, the
    rows above them here are not settled yet (0009_live_partition_count): a drain
    waits for the run's other partitions, for at most ``_COUNT_CHANGE_WAIT_S``. False
    when it stops waiting."""
    if not source.count_change_pending():
        return True  # published meanwhile: one more round
    if clock.monotonic() - since >= _COUNT_CHANGE_WAIT_S:
        log.warning(
            "relay partition %d: rows of the previous relay partition count are still "
            "unpublished in other partitions; the rows above them wait for a later run",
            partition,
        )
        return False
    return not clock.wait(_COUNT_CHANGE_POLL_S, stop)
