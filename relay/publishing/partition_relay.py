"""Publishing one relay partition: the loop both `relay run` and the Spark job drive.

Start-up (the checks: :mod:`relay.publishing.positions`)::

    read the floor  ->  fence (take the partition over)  ->  read the committed position
    and its owner
    ->  refuse it if another database or prefix committed it, if it is beyond anything
        this database assigned, or if it is below the floor this database recorded

Order of one batch (one Kafka transaction)::

    fetch rows seq > position  ->  begin  ->  send rows  ->  commit(rows + new position)
    ->  position = last seq  ->  after a batch or when nothing is pending, at most
        every ``housekeeping_every_s`` (and at the end of a drain): record the floor,
        delete rows <= position (housekeeping, after the commit, one database
        transaction)

The position lives only in Kafka, committed atomically with the records, and it is read
only after fencing; so a crash at any point, a re-run task or a zombie can neither lose
nor duplicate a row (I3, docs/invariants.md). The database is never asked what was
published: its floor only lags behind Kafka's position, and serves to notice a position
that went back (expired or deleted offsets of the positions group).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from relay.errors import (
    AmbiguousCommitError,
    ProducerFencedError,
    RelayError,
    RetriableError,
    TransactionTimedOutError,
    UndeliverableEventError,
)
from relay.publishing.drain import drain
from relay.publishing.heartbeats import DEFAULT_INTERVAL_S, HeartbeatPlan
from relay.publishing.holds import MISSING_TOPIC_WAIT_S, PartitionHolds
from relay.publishing.ports import (
    NoObserver,
    OutboxSource,
    RelayObserver,
    TransactionalPublisher,
)
from relay.publishing.positions import checked_position
from relay.publishing.retrying import BatchRetries
from relay.publishing.types import (
    BatchResult,
    DrainResult,
    OutboxRecord,
    PositionOwner,
)
from relay.runtime.batch_limits import BatchLimits
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.failpoints import NO_FAILPOINTS, FailpointHook
from relay.runtime.heartbeat import Heartbeat
from relay.runtime.retry import RetryPolicy

log = logging.getLogger(__name__)

HOUSEKEEPING_EVERY_S = 1.0
"""How often a busy partition deletes its published rows: a database transaction (and,
on a durable server, a WAL flush) per batch took a fifth of a small batch's time."""
READY = "ready, earlier producers of this partition fenced"
"""What a relay partition's start-up line says once it holds the partition (``relay
partition 3: ready, ...``): the routine fence of earlier instances, not an error. The
readers of logs (relay.chaos.logwatch) look for it."""


class PartitionRelay:
    """Publishes the committed outbox rows of one relay partition to Kafka, exactly once."""

    def __init__(
        self,
        partition: int,
        source: OutboxSource,
        publisher: TransactionalPublisher,
        *,
        owner: PositionOwner,
        batch_size: int = 5000,
        batch_bytes: int = 16 * 1024 * 1024,
        transaction_timeout_s: float | None = None,
        cleanup: bool = True,
        housekeeping_every_s: float = HOUSEKEEPING_EVERY_S,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        failpoints: FailpointHook | None = None,
        observer: RelayObserver | None = None,
        heartbeat_topics: Sequence[str] = (),
        heartbeat_interval_s: float = DEFAULT_INTERVAL_S,
        missing_topic_wait_s: float = MISSING_TOPIC_WAIT_S,
        after_fence: Callable[[], None] | None = None,
    ) -> None:
        self.partition = partition
        self._source = source
        self._publisher = publisher
        self._owner = owner
        self._limits = BatchLimits(batch_size, batch_bytes, transaction_timeout_s)
        self._cleanup = cleanup
        self._housekeeping_every_s = housekeeping_every_s
        self._housekept = 0  # the position up to which the database recorded publishing
        self._housekept_at = 0.0
        self._clock = clock or SystemClock()
        self._failpoints = failpoints or NO_FAILPOINTS
        self._observer = observer or NoObserver()
        self._after_fence = after_fence  # e.g. no `relay run` member beside a --once run
        self._position: int | None = None
        self._committed_at = 0.0  # clock time of the last commit of the position
        self._unsettled = False  # a transaction failed: restart before the next batch
        self.heartbeats = HeartbeatPlan(
            partition, owner.database_id, heartbeat_topics, heartbeat_interval_s
        )
        self._holds = PartitionHolds(
            partition, source, self._observer, self._clock, missing_topic_wait_s
        )
        self._retries = BatchRetries(
            partition, self._holds, retry or RetryPolicy(), self._clock, self._observer
        )

    @property
    def position(self) -> int:
        if self._position is None:
            raise RuntimeError("start() has not run: the position is unknown until fenced")
        return self._position

    def start(self) -> int:
        """Fence previous owners, learn the committed position and check it.

        The floor is read first: every floor was in Kafka before it was recorded, so the
        position read after it is at least the floor unless offsets were lost. Read the
        other way round, a process paused between the two reads could hold a position that
        another instance overtook, and be refused for offsets that were never lost."""
        floor = self._source.published_floor(self.partition)
        committed = self._publisher.fence()
        if self._after_fence is not None:
            self._after_fence()
        position = checked_position(
            self.partition,
            committed,
            self._owner,
            assigned=self._source.last_assigned_seq(),
            floor=floor,
        )
        self._position = position
        self._committed_at = self._clock.monotonic()  # or as good as: read back just now
        log.info(
            "relay partition %d: %s; %s",
            self.partition,
            READY,
            f"resuming after seq {position}" if position else "nothing published yet",
            extra={"partition": self.partition, "position": position},
        )
        self._failpoints.hit("startup", self.partition)
        self._housekept = 0
        self.housekeep()
        self._observer.running(self.partition, position)
        return self._position

    def _restart(self) -> None:
        """After a failed transaction: a new producer, fenced again (which settles a
        transaction in doubt on the broker), and the position read again, with or without
        the failed batch; the start-up checks apply to it as at start-up."""
        self._publisher.reset()
        self.start()
        self._unsettled = False

    def _settle_first(self) -> None:
        if self._unsettled:
            self._restart()

    def _transaction_failed(self, exc: RetriableError | UndeliverableEventError) -> None:
        """Abort the open transaction after ``exc`` (not when its outcome is unknown)."""
        if isinstance(exc, AmbiguousCommitError):
            self._unsettled = True  # committed or not: the next fence settles it
            return
        self._observer.transaction(self.partition, committed=False)
        # Even after a clean abort, read the position again before the next batch: an
        # abort that needed an epoch bump may have left this producer with a new producer
        # id that fenced nobody (the broker expired the transactional id while this
        # instance was paused past transactional.id.expiration.ms), while another instance
        # moved the position on in the meantime.
        self._unsettled = True
        self._publisher.abort()

    def _fenced(
        self, exc: ProducerFencedError, records: Sequence[OutboxRecord], open_s: float
    ) -> RelayError:
        """A fence during a batch's transaction (BatchLimits.fence_error): after a timeout
        the fenced producer is unusable, so it is rebuilt and fences again."""
        error = self._limits.fence_error(
            exc,
            open_s,
            records,
            where=f"relay partition {self.partition}",
            transaction=f"Kafka transaction of seq {records[0].seq}..{records[-1].seq} "
            f"({len(records)} rows)",
            units="rows",
            taker="another relay instance initialised this partition's transactional id "
            "and took the partition over",
        )
        if isinstance(error, TransactionTimedOutError):
            self._unsettled = True
            self._observer.transaction(self.partition, committed=False)
        return error

    def housekeep(self) -> None:
        """Record the position as published in the database (the floor) and delete the
        rows up to it, when the position moved since the last time."""
        position = self.position
        if position > self._housekept:
            self._source.record_published(self.partition, position, delete_rows=self._cleanup)
            self._housekept = position
        self._housekept_at = self._clock.monotonic()

    def _housekeep_if_due(self, now: float) -> None:
        """:meth:`housekeep` at most every ``housekeeping_every_s``."""
        if now - self._housekept_at >= self._housekeeping_every_s:
            self.housekeep()

    def keep_alive(self, heartbeat: Heartbeat | None = None) -> None:
        """Commit the unchanged position again, so that the broker's offset retention
        (``offsets.retention.minutes``) never expires an idle partition's position; with
        ``heartbeat``, sent to the heartbeat topics in the same transaction."""
        self._settle_first()
        try:
            self._publisher.begin()
        except AmbiguousCommitError:
            self._unsettled = True
            raise
        try:
            if heartbeat is not None:
                self._publisher.send_heartbeats(self.heartbeats.topics, heartbeat)
            self._publisher.commit(self.position)
        except RetriableError as exc:
            self._transaction_failed(exc)
            raise
        self._committed_at = self._clock.monotonic()
        if heartbeat is not None:
            self.heartbeats.sent(heartbeat, self._committed_at)
        self._observer.transaction(self.partition, committed=True)
        log.debug("relay partition %d: position %d kept alive", self.partition, self.position)

    def keep_alive_if_due(self, every_s: float) -> bool:
        """:meth:`keep_alive` when the position was last committed ``every_s`` ago or
        more (an idle partition of a long-running relay), or a heartbeat is due. True
        when it committed."""
        now = self._clock.monotonic()
        heartbeat = self.heartbeats.due(now, self.position)
        if heartbeat is None and (self.position == 0 or now - self._committed_at < every_s):
            return False
        try:
            self.keep_alive(heartbeat)
        except RetriableError as exc:
            log.warning(
                "relay partition %d: keeping the position alive failed (%s)", self.partition, exc
            )
            return False
        return True

    def publish_batch(
        self, up_to_seq: int | None = None, stop: threading.Event | None = None
    ) -> BatchResult | None:
        """Publish the next batch in one Kafka transaction; None when nothing is pending.
        Tried again after failures as each asks (:mod:`relay.publishing.retrying`)."""
        return self._retries.run(
            lambda: self._try_batch(up_to_seq),
            position=lambda: self.position,
            in_doubt=self._in_doubt,
            unsettled=lambda: self._unsettled,
            stop=stop,
        )

    def _in_doubt(self) -> None:
        self._unsettled = True  # the next attempt restarts first

    def _try_batch(self, up_to_seq: int | None) -> BatchResult | None:
        began = self._clock.monotonic()
        self._settle_first()
        self._holds.flush()  # rows refused for good, after the failed batch
        position = self.position
        self._publisher.prepare()  # a shared transaction ending: read after its commit
        try:
            fetched = self._fetch(position, up_to_seq)
            if fetched:
                records = self._limits.take(fetched)
                self._publisher.begin()  # joins the transaction prepare announced it to
        except BaseException:
            self._publisher.withdraw()
            raise
        self.heartbeats.learnt(self._source.settled(self.partition))
        if not fetched:
            self._publisher.withdraw()
            self.heartbeats.committed(position)
            self._housekeep_if_due(self._clock.monotonic())  # idle: catch up
            return None
        last_seq = records[-1].seq
        opened = self._clock.monotonic()
        heartbeat = self.heartbeats.due(opened, last_seq)
        try:
            self._publisher.send(records)
            if heartbeat is not None:  # after the records it vouches for
                self._publisher.send_heartbeats(self.heartbeats.topics, heartbeat)
            self._failpoints.hit("after_produce", self.partition)
            self._failpoints.hit("before_commit", self.partition)
            self._publisher.commit(last_seq)
        except (RetriableError, UndeliverableEventError) as exc:
            try:
                self._transaction_failed(exc)  # aborts: a fence may come only now
            except ProducerFencedError as fenced:
                raise self._fenced(fenced, records, self._clock.monotonic() - opened) from exc
            raise
        except ProducerFencedError as exc:
            raise self._fenced(exc, records, self._clock.monotonic() - opened) from None
        self._position = last_seq
        self._committed_at = self._clock.monotonic()
        self.heartbeats.committed(last_seq)
        if heartbeat is not None:
            self.heartbeats.sent(heartbeat, self._committed_at)
        self._limits.committed(self._committed_at - opened)
        self._observer.transaction(self.partition, committed=True)
        times = [r.timestamp_ms for r in records]  # each row's created_at, in ms
        self._observer.published(self.partition, len(records), self._committed_at - began, times)
        self._failpoints.hit("after_commit", self.partition)
        self._holds.published(records)
        self._housekeep_if_due(self._committed_at)
        return BatchResult(self.partition, len(records), records[0].seq, last_seq)

    def _fetch(self, position: int, up_to_seq: int | None) -> list[OutboxRecord]:
        """The next rows, without those that follow a dead letter of their key (moved to
        the dead letters, I2); fetched again when nothing else was left."""
        while True:
            found = self._source.fetch(self.partition, position, self._limits.rows, up_to_seq)
            kept = self._holds.followers(found)
            if kept or not found:
                return kept

    def drain(self, stop: threading.Event | None = None) -> DrainResult:
        """Publish every row committed before this call, then return."""
        if self._position is None:
            self.start()
        return drain(self, self._source, self._clock, stop)

    def close(self) -> None:
        """Close the producer, after recording what was published (best effort)."""
        try:
            if self._position is not None:
                self.housekeep()
                self._holds.moving()
        except RetriableError as exc:
            log.warning("relay partition %d: recording what was published: %s", self.partition, exc)
        finally:
            self._publisher.close()
