"""Interfaces the replicator's core needs; librdkafka implements them in relay.kafka."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from relay.replication.types import LastCopy, PositionStamp, ReplicaPosition, SourceRecord


class SourceReader(Protocol):
    """One source partition, read ``read_committed``: records of aborted transactions and
    transaction markers never come out."""

    def seek(self, next_offset: int) -> None:
        """Read from ``next_offset`` on (the partition's first offset when it is older)."""
        ...

    def read(self, max_records: int, wait_s: float) -> Sequence[SourceRecord]:
        """The next committed records, in offset order; waits up to ``wait_s`` for the
        first one, and returns what came (maybe nothing)."""
        ...

    def position(self) -> int:
        """The offset the next read starts at: past the records read, and past any
        aborted records and transaction markers behind them."""
        ...

    def end_offset(self) -> int:
        """The partition's last stable offset now: what a run that copies everything
        committed so far copies up to."""
        ...

    def close(self) -> None: ...


class ReplicaWriter(Protocol):
    """One target partition's transactional producer and the replicated partition's
    position, kept on the target cluster.

    :meth:`fence` is the only way to learn the position, and it fences first (I3,
    docs/invariants.md, applied to a source partition instead of a relay partition).
    """

    def fence(self) -> ReplicaPosition:
        """Take the partition over (aborting and fencing any previous instance's
        transaction), then return the committed position."""
        ...

    def position(self) -> ReplicaPosition:
        """The committed position now (after :meth:`fence`): read again before each batch,
        to notice another writer of it."""
        ...

    def begin(self) -> None: ...

    def send(self, records: Sequence[SourceRecord]) -> None:
        """Queue copies of ``records`` in the open transaction, same partition, with their
        key, value, headers and timestamp, plus the provenance headers."""
        ...

    def commit(self, next_offset: int, stamp: PositionStamp) -> None:
        """Commit the open transaction with the position ``next_offset`` and its ``stamp``
        (the offset's metadata). Raises as
        :meth:`relay.publishing.ports.TransactionalPublisher.commit`."""
        ...

    def last_copy(self, since: int) -> LastCopy | None:
        """The last committed copy in the target partition at target offset ``since`` or
        later (read ``read_committed`` back from the partition's last stable offset);
        None when there is none."""
        ...

    def stable_end(self) -> int:
        """The target partition's last stable offset now."""
        ...

    def abort(self) -> None: ...

    def reset(self) -> None:
        """Drop the producer after a failed transaction and build a new one with the same
        transactional.id; then :meth:`fence` again."""
        ...

    def close(self) -> None: ...


class TopicIds(Protocol):
    """The ids of the source and target topics (a topic deleted and created again under
    the same name gets a new one), as described at or after a moment."""

    def source(self, topic: str, since: float) -> str | None:
        """The source topic's id, described at or after monotonic time ``since`` (None:
        ids unknown, nothing is checked)."""
        ...

    def target(self, topic: str, since: float) -> str | None:
        """The target topic's id, described at or after monotonic time ``since``."""
        ...


class NoTopicIds:
    """Topic ids nobody knows: nothing is checked (tests of other things)."""

    def source(self, topic: str, since: float) -> str | None:
        return None

    def target(self, topic: str, since: float) -> str | None:
        return None


class ReplicaObserver(Protocol):
    """Told what a replicated partition does, for metrics and progress
    (relay.runtime.metrics.ReplicaMetrics); it changes nothing the replicator does."""

    def running(self, topic: str, partition: int, next_offset: int) -> None:
        """Started at ``next_offset``, a batch committed up to it, or everything below it
        was read and copied or skipped (aborted records, markers): not retrying."""

    def copied(
        self,
        topic: str,
        partition: int,
        records: int,
        seconds: float,
        event_times_ms: Sequence[int] = (),
    ) -> None:
        """A batch committed ``records`` copies just now, ``seconds`` after its read
        began; ``event_times_ms``: each copy's source timestamp (0: none)."""

    def retrying(self, topic: str, partition: int) -> None:
        """A batch failed with a transient error and waits to be tried again."""

    def complete_through(self, topic: str, partition: int, as_of_ms: int) -> None:
        """Every record a read_committed consumer of the source partition could see at
        ``as_of_ms`` (ms since the epoch) is copied (relay.replication.freshness)."""


class NoReplicaObserver:
    """The observer of a replicator nobody watches."""

    def running(self, topic: str, partition: int, next_offset: int) -> None:
        pass

    def copied(
        self,
        topic: str,
        partition: int,
        records: int,
        seconds: float,
        event_times_ms: Sequence[int] = (),
    ) -> None:
        pass

    def retrying(self, topic: str, partition: int) -> None:
        pass

    def complete_through(self, topic: str, partition: int, as_of_ms: int) -> None:
        pass
