"""Copying one source partition to the target cluster: the loop `relay replicate` and the
Spark job drive.

Start-up (relay.replication.startup)::

    fence (take the target partition's transactional id over)  ->  read the position
    committed on the target, check it (relay.replication.position_check)  ->  seek there

Order of one batch (one transaction on the target cluster)::

    read committed source records  ->  begin  ->  send the copies, while both topics'
    ids and the position are checked (relay.replication.batch_check)  ->  commit(copies
    + the position after them); a failed check or a fatal error aborts instead

The position lives only on the target cluster, committed atomically with the copies, and
is read only after fencing: a crash, a re-run task or a second instance can neither lose
nor duplicate a record (I3, I7, docs/invariants.md). The source is read
``read_committed``, each partition's order kept in its target partition (I8). A
``--once`` run or a Spark task copies up to an end offset, then returns
(relay.replication.drain).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from operator import attrgetter
from typing import TypeVar

from relay.errors import (
    AmbiguousCommitError,
    KafkaError,
    ProducerFencedError,
    RelayError,
    RetriableError,
    TransactionTimedOutError,
)
from relay.replication.batch_check import BatchChecks
from relay.replication.drain import drain
from relay.replication.freshness import Freshness
from relay.replication.ports import (
    NoReplicaObserver,
    NoTopicIds,
    ReplicaObserver,
    ReplicaWriter,
    SourceReader,
    TopicIds,
)
from relay.replication.position_check import same_topics
from relay.replication.retrying import retrying
from relay.replication.startup import fenced_start
from relay.replication.types import (
    Origin,
    PositionStamp,
    ReplicaBatch,
    ReplicaResult,
    Route,
    SourceRecord,
)
from relay.runtime.batch_limits import BatchLimits
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.failpoints import NO_FAILPOINTS, FailpointHook
from relay.runtime.retry import RetryPolicy

log = logging.getLogger(__name__)

T = TypeVar("T")
_EVENT_TIME = attrgetter("timestamp_ms")  # iterated in C, once per record


class PartitionReplicator:
    """Copies the committed records of one source partition to the target, exactly once."""

    def __init__(
        self,
        route: Route,
        reader: SourceReader,
        writer: ReplicaWriter,
        *,
        origin: Origin,
        batch_size: int = 5000,
        batch_bytes: int = 16 * 1024 * 1024,
        transaction_timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        failpoints: FailpointHook | None = None,
        observer: ReplicaObserver | None = None,
        ids: TopicIds | None = None,
        owner: PositionStamp | None = None,
        heartbeat_s: float = 0.0,
        wall: Callable[[], float] = time.time,
        checks: Executor | None = None,
    ) -> None:
        self.route = route
        self._reader = reader
        self._writer = writer
        self._origin = origin
        self._ids = ids or NoTopicIds()
        self._owner = owner or PositionStamp(origin)  # its cluster id and prefix
        self._stamp = self._owner  # what commits write (start() adds the topic ids)
        self._read_at = 0.0  # when the records in _read were read
        self._limits = BatchLimits(batch_size, batch_bytes, transaction_timeout_s)
        self._retry = retry or RetryPolicy()
        self._clock = clock or SystemClock()
        self._failpoints = failpoints or NO_FAILPOINTS
        self._observer = observer or NoReplicaObserver()
        self._next: int | None = None
        self._read: list[SourceRecord] = []  # read from the source, not copied yet
        self._committed_at = 0.0
        self._unsettled = False  # a transaction failed: restart before the next batch
        self._freshness = Freshness(heartbeat_s, self._clock, wall)  # every heartbeat_s
        self._checks = BatchChecks(route, checks)  # on the run's pool, if given

    @property
    def next_offset(self) -> int:
        """The next source offset to copy, as committed on the target."""
        if self._next is None:
            raise RuntimeError("start() has not run: the position is unknown until fenced")
        return self._next

    def start(self) -> int:
        """Fence previous instances, learn the committed position, check it (against its
        stamp, the source's end and the target's last copy), seek there
        (:mod:`relay.replication.startup`)."""
        self._next, self._stamp = fenced_start(
            self.route, self._reader, self._writer, origin=self._origin, owner=self._owner,
            ids=self._ids, clock=self._clock,
        )  # fmt: skip
        self._read.clear()  # the source is read again from there
        self._committed_at = self._clock.monotonic()
        self._failpoints.hit("startup", self.route.partition)
        self._observer.running(self.route.topic, self.route.partition, self._next)
        if self._stamp.as_of_ms is not None:  # committed with the position: still true
            self._observer.complete_through(
                self.route.topic, self.route.partition, self._stamp.as_of_ms
            )
        return self._next

    def start_retrying(self, stop: threading.Event | None = None) -> int | None:
        """:meth:`start`, tried again after transient errors (a broker restarting on either
        side) as the retry policy allows; None when ``stop`` is set meanwhile."""
        return self._retrying(lambda: "start-up", self.start, stop)

    def _retrying(
        self, what: Callable[[], str], attempt: Callable[[], T], stop: threading.Event | None
    ) -> T | None:
        return retrying(
            self.route, what, attempt, stop, retry=self._retry, clock=self._clock,
            observer=self._observer, in_doubt=self._in_doubt,
        )  # fmt: skip

    def _in_doubt(self) -> None:
        self._unsettled = True  # the next attempt restarts first

    def _restart(self) -> None:
        """After a failed transaction: a new producer, fenced again (which settles a
        transaction in doubt), the position read again and the source read from there."""
        self._writer.reset()
        self.start()
        self._unsettled = False

    def copy_batch(
        self, up_to: int | None = None, wait_s: float = 0.0, stop: threading.Event | None = None
    ) -> ReplicaBatch | None:
        """Copy the next batch (source offsets below ``up_to``, if given) in one target
        transaction; None when no record came within ``wait_s``."""
        return self._retrying(
            lambda: f"batch from offset {self._next}", lambda: self._try_batch(up_to, wait_s), stop
        )

    def _take(self, up_to: int | None, wait_s: float) -> list[SourceRecord]:
        if not self._read:
            if up_to is not None and self._reader.position() >= up_to:
                return []  # read up to the end: no need to wait for more
            try:
                self._read = list(self._reader.read(self._limits.rows, wait_s))
            except KafkaError:  # e.g. the source partition now ends below the position:
                same_topics(self.route, self._stamp, self._ids, self._clock.monotonic())
                raise  # refused above when its topic was created again, with the way out
            self._read_at = self._clock.monotonic()
        records = list(self._limits.take(self._read))
        if up_to is not None and records and records[-1].offset >= up_to:
            records = [r for r in records if r.offset < up_to]
        return records

    def _try_batch(self, up_to: int | None, wait_s: float) -> ReplicaBatch | None:
        began = self._clock.monotonic()
        if self._unsettled:
            self._restart()
        self._freshness.probe_if_due(self._reader.end_offset, self.route)
        records = self._take(up_to, wait_s)
        if not records:
            if not self._read:  # caught up: only aborted records and markers were skipped
                read_up_to = max(self.next_offset, self._reader.position())
                self._settled(self._freshness.stamped(self._stamp, read_up_to))
                self._observer.running(self.route.topic, self.route.partition, read_up_to)
            return None
        next_offset = records[-1].offset + 1
        # Past this batch: aborted records and markers read behind it are done too.
        done = next_offset if len(records) < len(self._read) else self._reader.position()
        stamp = self._freshness.stamped(self._stamp, max(next_offset, done))
        self._writer.begin()
        opened = self._clock.monotonic()
        # Checked while the copies are sent; the commit waits for it (batch_check).
        check = self._checks.start(self._stamp, self._ids, self._read_at, self._writer.position)
        fits = False
        try:
            self._writer.send(records)
            self._failpoints.hit("after_produce", self.route.partition)
            fits = check.result()
            if fits:
                self._failpoints.hit("before_commit", self.route.partition)
                self._writer.commit(next_offset, stamp)
        except ProducerFencedError as exc:
            raise self._fenced(exc, records, self._clock.monotonic() - opened) from None
        except RetriableError as exc:
            try:
                self._failed(exc)
            except ProducerFencedError as fenced:
                raise self._fenced(fenced, records, self._clock.monotonic() - opened) from exc
            raise
        except BaseException:
            self._abort_quietly()  # a fatal error: leave no transaction open behind
            raise
        finally:
            check.settle()  # none left running behind: it reads through the writer
        if not fits:  # the target topic was created again: read the position again
            self._abort_quietly()
            self._restart()
            return None
        del self._read[: len(records)]
        self._next = next_offset
        self._settled(stamp)
        self._committed_at = self._clock.monotonic()
        self._limits.committed(self._committed_at - opened)
        self._observer.copied(
            self.route.topic,
            self.route.partition,
            len(records),
            self._committed_at - began,
            list(map(_EVENT_TIME, records)),
        )
        self._observer.running(self.route.topic, self.route.partition, next_offset)
        self._failpoints.hit("after_commit", self.route.partition)
        return ReplicaBatch(len(records), records[0].offset, next_offset)

    def _settled(self, stamp: PositionStamp) -> None:
        """``stamp`` holds now: committed, or nothing was left to copy below its time."""
        if stamp is self._stamp:
            return
        self._freshness.settle()
        self._stamp = stamp
        if stamp.as_of_ms is not None:
            self._observer.complete_through(self.route.topic, self.route.partition, stamp.as_of_ms)

    def _abort_quietly(self) -> None:
        try:
            self._writer.abort()
        except Exception as exc:  # the error that brought us here is the one to report
            log.warning("%s: aborting the open transaction failed: %s", self.route, exc)

    def _failed(self, exc: RetriableError) -> None:
        """Abort after ``exc`` (not when the outcome is unknown); restart before the next
        batch either way: the position is read again after fencing, with or without it."""
        self._unsettled = True
        if not isinstance(exc, AmbiguousCommitError):
            self._writer.abort()

    def _fenced(
        self, exc: ProducerFencedError, records: list[SourceRecord], open_s: float
    ) -> RelayError:
        """A fence during a batch's transaction (BatchLimits.fence_error)."""
        error = self._limits.fence_error(
            exc,
            open_s,
            records,
            where=str(self.route),
            transaction=f"target transaction of offsets {records[0].offset}..{records[-1].offset}",
            units="records",
            taker="another replicator instance took this partition over",
        )
        if isinstance(error, TransactionTimedOutError):
            self._unsettled = True
        return error

    def keep_alive_if_due(self, every_s: float) -> bool:
        """Commit the unchanged position again when it was last committed ``every_s`` ago
        or more, so that the target's offset retention never expires it."""
        if not self._next or self._clock.monotonic() - self._committed_at < every_s:
            return False
        try:
            if self._unsettled:
                self._restart()
            self._writer.begin()
            try:
                self._writer.commit(self.next_offset, self._stamp)
            except RetriableError as exc:
                self._failed(exc)
                raise
            except ProducerFencedError:
                raise
            except BaseException:
                self._abort_quietly()
                raise
        except RetriableError as exc:
            self._unsettled = True
            log.warning("%s: keeping the position alive failed (%s)", self.route, exc)
            return False
        self._committed_at = self._clock.monotonic()
        return True

    def started(self) -> bool:
        """Whether :meth:`start` has run: the position is known."""
        return self._next is not None

    def read_past(self, offset: int) -> bool:
        """Whether the source was read up to ``offset`` or beyond: nothing to copy is left
        below it (only aborted records and transaction markers)."""
        return bool(self._read) or self._reader.position() >= offset

    def drain(
        self, end_offset: int, wait_s: float = 0.5, stop: threading.Event | None = None
    ) -> ReplicaResult:
        """Copy every committed record below ``end_offset`` (the source's last stable
        offset when the run began), then return (:mod:`relay.replication.drain`)."""
        return drain(self, end_offset, wait_s, stop)

    def close(self) -> None:
        self._checks.close()
        for release in (self._reader.close, self._writer.close):
            with contextlib.suppress(RelayError):
                release()
