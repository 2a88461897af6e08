"""Interfaces the core needs; PostgreSQL and Kafka implement them at the edges."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from relay.publishing.types import CommittedPosition, OutboxIdentity, OutboxRecord, Settled
from relay.runtime.heartbeat import Heartbeat


class OutboxSource(Protocol):
    """Committed outbox rows of one relay partition, in seq order."""

    def high_water(self, partition: int) -> int:
        """The largest seq of the rows of ``partition`` still in the outbox (0 when none):
        what a run that drains the partition publishes up to."""
        ...

    def fetch(
        self, partition: int, after_seq: int, limit: int, up_to_seq: int | None = None
    ) -> Sequence[OutboxRecord]:
        """Up to ``limit`` rows with ``after_seq < seq [<= up_to_seq]``, ascending seq;
        a row after a dead letter of its key names the key's first (``follows``)."""
        ...

    def settled(self, partition: int) -> Settled | None:
        """What the latest :meth:`fetch` or :meth:`high_water` of ``partition`` learnt
        with its horizon, or an earlier one (None: nothing yet). After a fetch that found
        nothing up to the horizon, ``top`` is at most the position it read after."""
        ...

    def count_change_pending(self) -> bool:
        """Whether rows partitioned with the previous relay partition count still wait to
        be published (in any partition): until then no partition is settled above them
        (0009_live_partition_count)."""
        ...

    def last_assigned_seq(self) -> int:
        """The largest seq this database ever handed out, in any partition (0 when none)."""
        ...

    def dead_letter(self, partition: int, outbox_ids: Sequence[int], error: str) -> int:
        """Move rows Kafka refuses for good to the dead-letter table, with ``error``,
        in one transaction. Returns how many moved."""
        ...

    def record_stall(
        self, partition: int, outbox_id: int | None, topic: str | None, reason: str
    ) -> None:
        """Record what holds ``partition`` while its batch is retried (``relay status``):
        the row at fault and its topic when one is, and the reason; since when stays as
        it was while the row is the same."""
        ...

    def clear_stall(self, partition: int) -> None:
        """Nothing holds ``partition`` any more."""
        ...

    def identity(self) -> OutboxIdentity:
        """This database's identity, which every committed position carries."""
        ...

    def published_floor(self, partition: int) -> int:
        """The highest position recorded as published in ``partition`` (0 when none):
        Kafka's position must never be below it."""
        ...

    def record_published(self, partition: int, position: int, *, delete_rows: bool) -> int:
        """After a Kafka commit: raise the partition's floor to ``position`` and, with
        ``delete_rows``, remove the rows with ``seq <= position`` (housekeeping), in one
        transaction. Returns how many rows were removed."""
        ...


class TransactionalPublisher(Protocol):
    """One relay partition's transactional producer and its committed position.

    :meth:`fence` is the only way to learn the position, and it fences first: the
    position is never read before this instance owns the partition (I3, docs/invariants.md).
    """

    def fence(self) -> CommittedPosition:
        """Take over the partition (aborting and fencing any previous owner's
        transaction), then return the committed position: the seq of the last row
        published (0 when none) and the owner recorded with it."""
        ...

    def prepare(self) -> None:
        """Called before the rows of a batch are read. A publisher that shares its
        transactions with other partitions waits here while one ends, and keeps the next
        one open for this partition until :meth:`begin` or :meth:`withdraw`."""
        ...

    def withdraw(self) -> None:
        """After :meth:`prepare`, when no transaction follows (nothing to publish, or the
        read failed)."""
        ...

    def begin(self) -> None: ...

    def send(self, records: Sequence[OutboxRecord]) -> None:
        """Queue ``records`` in the open transaction, without waiting per record."""
        ...

    def send_heartbeats(self, topics: Sequence[str], heartbeat: Heartbeat) -> None:
        """Queue ``heartbeat`` in the open transaction, to every partition of each of
        ``topics`` (after what :meth:`send` queued). Raises TopicMissingError when one
        of them does not exist."""
        ...

    def commit(self, position: int) -> None:
        """Commit the open transaction together with the new ``position`` (stamped with
        this publisher's owner). A transaction with no records re-commits a position
        (keeping it alive within the broker's offset retention).

        Raises ProducerFencedError when another instance took over, RetriableError when
        the transaction was aborted and the batch may be sent again, AmbiguousCommitError
        when it may or may not have committed (then :meth:`reset`)."""
        ...

    def abort(self) -> None:
        """Abort the open transaction. Raises AmbiguousCommitError when the abort did not
        complete (then :meth:`reset`)."""
        ...

    def reset(self) -> None:
        """Drop the producer after AmbiguousCommitError (from :meth:`begin`,
        :meth:`commit` or :meth:`abort`) and build a new one with the same
        transactional.id. The instance then needs :meth:`fence` again, which settles the
        pending transaction on the broker and reads the position, with or without the
        ambiguous batch."""
        ...

    def close(self) -> None: ...


class RelayObserver(Protocol):
    """Told what a relay partition does, for metrics and readiness
    (relay.runtime.metrics.OutboxMetrics); it changes nothing the relay does."""

    def running(self, partition: int, position: int) -> None:
        """Started at ``position``, or a batch attempt succeeded (published or found
        nothing): not retrying."""

    def transaction(self, partition: int, committed: bool) -> None:
        """A Kafka transaction (a batch, or a keep-alive of the position) ended."""

    def published(
        self, partition: int, records: int, seconds: float, event_times_ms: Sequence[int] = ()
    ) -> None:
        """A batch committed ``records`` rows, ``seconds`` after its fetch began, just now;
        ``event_times_ms``: each row's created_at (its Kafka timestamp; 0: none)."""

    def retrying(self, partition: int, reason: str = "") -> None:
        """A batch failed with a transient error (``reason``) and waits to be tried again."""

    def dead_lettered(self, partition: int, rows: int) -> None:
        """Kafka refused ``rows`` for good; they moved to outbox_dead_letters."""


class NoObserver:
    """The observer of a relay nobody watches."""

    def running(self, partition: int, position: int) -> None:
        pass

    def transaction(self, partition: int, committed: bool) -> None:
        pass

    def published(
        self, partition: int, records: int, seconds: float, event_times_ms: Sequence[int] = ()
    ) -> None:
        pass

    def retrying(self, partition: int, reason: str = "") -> None:
        pass

    def dead_lettered(self, partition: int, rows: int) -> None:
        pass


class PublisherDecorator:
    """A :class:`TransactionalPublisher` that hands every call to ``inner``: subclasses
    change what they need (the records sent: relay.publishing.cloudevents; a span per
    transaction: relay.publishing.traced)."""

    def __init__(self, inner: TransactionalPublisher) -> None:
        self._inner = inner

    def fence(self) -> CommittedPosition:
        return self._inner.fence()

    def prepare(self) -> None:
        self._inner.prepare()

    def withdraw(self) -> None:
        self._inner.withdraw()

    def begin(self) -> None:
        self._inner.begin()

    def send(self, records: Sequence[OutboxRecord]) -> None:
        self._inner.send(records)

    def send_heartbeats(self, topics: Sequence[str], heartbeat: Heartbeat) -> None:
        self._inner.send_heartbeats(topics, heartbeat)

    def commit(self, position: int) -> None:
        self._inner.commit(position)

    def abort(self) -> None:
        self._inner.abort()

    def reset(self) -> None:
        self._inner.reset()

    def close(self) -> None:
        self._inner.close()
