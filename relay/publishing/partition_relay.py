"""Publishing one relay partition: the loop both `relay run` and the Spark job drive.

Order of one batch (one Kafka transaction)::

    fetch rows seq > position  ->  begin  ->  send rows  ->  commit(rows + new position)
    ->  position = last seq  ->  delete rows <= position (housekeeping, after the commit)

The position lives only in Kafka, committed atomically with the records, and it is read
only after fencing; so a crash at any point, a re-run task or a zombie can neither lose
nor duplicate a row (I3, docs/invariants.md). The database is never asked what was published.
"""

from __future__ import annotations

import logging
import threading

from relay.errors import (
    ConfigurationError,
    GaveUpError,
    RetriableError,
    UndeliverableEventError,
)
from relay.publishing.ports import OutboxSource, TransactionalPublisher
from relay.publishing.types import BatchResult, DrainResult
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.failpoints import NO_FAILPOINTS, FailpointHook
from relay.runtime.retry import RetryPolicy

log = logging.getLogger(__name__)


class PartitionRelay:
    """Publishes the committed outbox rows of one relay partition to Kafka, exactly once."""

    def __init__(
        self,
        partition: int,
        source: OutboxSource,
        publisher: TransactionalPublisher,
        *,
        batch_size: int = 5000,
        cleanup: bool = True,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        failpoints: FailpointHook | None = None,
    ) -> None:
        self.partition = partition
        self._source = source
        self._publisher = publisher
        self._batch_size = batch_size
        self._cleanup = cleanup
        self._retry = retry or RetryPolicy()
        self._clock = clock or SystemClock()
        self._failpoints = failpoints or NO_FAILPOINTS
        self._position: int | None = None

    @property
    def position(self) -> int:
        if self._position is None:
            raise RuntimeError("start() has not run: the position is unknown until fenced")
        return self._position

    def start(self) -> int:
        """Fence previous owners and learn the committed position."""
        position = self._publisher.fence()
        assigned = self._source.last_assigned_seq()
        if position > assigned:
            raise ConfigurationError(
                f"relay partition {self.partition}: the positions group says seq {position} "
                f"was published, but this database never assigned a seq above {assigned}; "
                "the positions group belongs to another outbox database "
                "(set RELAY_POSITIONS_GROUP to a group of this database's own)"
            )
        self._position = position
        log.info("relay partition %d: fenced, position %d", self.partition, self._position)
        self._failpoints.hit("startup", self.partition)
        if self._cleanup:
            self._source.delete_published(self.partition, self._position)
        return self._position

    def publish_batch(
        self, up_to_seq: int | None = None, stop: threading.Event | None = None
    ) -> BatchResult | None:
        """Publish the next batch in one Kafka transaction; None when nothing is pending."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._try_batch(up_to_seq)
            except UndeliverableEventError as exc:  # _try_batch aborted the transaction
                moved = self._source.dead_letter(self.partition, exc.outbox_ids, exc.reason)
                log.error(
                    "relay partition %d: moved %d outbox row(s) %s to outbox_dead_letters: %s",
                    self.partition,
                    moved,
                    list(exc.outbox_ids),
                    exc.reason,
                )
                attempt = 0  # the rest of the batch goes out in the next transaction
            except RetriableError as exc:
                if self._retry.gives_up_after(attempt):
                    raise GaveUpError(
                        f"relay partition {self.partition}: batch after seq {self.position} "
                        f"failed {attempt} times, last error: {exc}"
                    ) from exc
                delay = self._retry.delay(attempt)
                log.warning(
                    "relay partition %d: batch aborted (%s); retrying in %.1f s",
                    self.partition,
                    exc,
                    delay,
                )
                if self._clock.wait(delay, stop):
                    return None

    def _try_batch(self, up_to_seq: int | None) -> BatchResult | None:
        position = self.position
        records = self._source.fetch(self.partition, position, self._batch_size, up_to_seq)
        if not records:
            return None
        last_seq = records[-1].seq
        self._publisher.begin()
        try:
            self._publisher.send(records)
            self._failpoints.hit("after_produce", self.partition)
            self._failpoints.hit("before_commit", self.partition)
            self._publisher.commit(last_seq)
        except (RetriableError, UndeliverableEventError):
            self._publisher.abort()
            raise
        self._position = last_seq
        self._failpoints.hit("after_commit", self.partition)
        if self._cleanup:
            self._source.delete_published(self.partition, last_seq)
        return BatchResult(self.partition, len(records), records[0].seq, last_seq)

    def drain(self, stop: threading.Event | None = None) -> DrainResult:
        """Publish every row committed before this call, then return."""
        if self._position is None:
            self.start()
        target = self._source.high_water(self.partition)
        records = batches = 0
        while self.position < target and not (stop is not None and stop.is_set()):
            result = self.publish_batch(up_to_seq=target, stop=stop)
            if result is None:
                break
            records += result.records
            batches += 1
        return DrainResult(self.partition, records, batches, self.position)

    def close(self) -> None:
        self._publisher.close()
