"""Interfaces the mirror's core needs; Kafka and PostgreSQL implement them at the edges."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from relay.mirroring.types import (
    ApplyResult,
    Batch,
    KafkaRecord,
    PartitionEnd,
    StoredOffset,
    TopicIdentity,
    TopicPartitionKey,
)


class MirrorStore(Protocol):
    """The mirrored tables, the stored offsets and the dead letters of one consumer group."""

    def stored_offsets(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, StoredOffset]:
        """The stored offset of every partition of the topics of ``partitions`` that has
        one (the others of a topic tell its partition count when they were stored)."""
        ...

    def apply(self, batch: Batch, before_commit: Callable[[], None]) -> ApplyResult:
        """Apply ``batch`` in one transaction: advance the stored offset from
        ``batch.expected`` to ``batch.next_offset`` (compare-and-set), run the row
        operations, dead-letter what cannot be applied, call ``before_commit``, commit.

        Raises MirrorOffsetConflict (nothing applied) when the stored offset is not
        ``batch.expected`` or is of another topic id than ``batch.identity``'s,
        RetriableError when the batch may simply be tried again."""
        ...

    def apply_together(
        self, batches: Sequence[Batch], before_commit: Callable[[], None]
    ) -> list[ApplyResult] | None:
        """Apply ``batches`` (of distinct partitions) in one transaction, as :meth:`apply`
        would one after the other; their results, in order. None, with nothing applied,
        when one of their records was refused (or the way they are applied together
        failed): apply them one at a time. Raises as :meth:`apply`."""
        ...


class TopicDirectory(Protocol):
    """What Kafka says the mapped topics are now."""

    def describe(self, topics: Sequence[str]) -> dict[str, TopicIdentity]:
        """The id and partition count of each topic. Raises KafkaError when one does not
        exist, RetriableError when Kafka did not answer."""
        ...


class RecordStream(Protocol):
    """A read_committed Kafka consumer, positioned by the core."""

    def poll(self, timeout: float) -> KafkaRecord | PartitionEnd | None:
        """The next record, or a PartitionEnd when a partition is read up to its last
        stable offset, or None when nothing arrived within ``timeout`` seconds."""
        ...

    def seek(self, topic: str, partition: int, offset: int | None) -> None:
        """Continue reading the partition at ``offset`` (None: at its beginning)."""
        ...

    def last_stable_offsets(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, int]: ...


class AssignmentListener(Protocol):
    """Told by the consumer edge which partitions this instance owns."""

    def assigned(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> Mapping[TopicPartitionKey, int | None]:
        """Called when partitions are assigned; returns where to start reading each
        one: the stored next offset, or None for the beginning."""
        ...

    def revoked(self, partitions: Sequence[TopicPartitionKey]) -> None:
        """Called when partitions are taken away (revoked or lost)."""
        ...


class ValueDecoder(Protocol):
    """Decodes a record value of a schema registry format (``format`` in the mapping) into
    a JSON-like object (dicts, lists, str, int, float, bool, None; dates, decimals and
    bytes as their JSON text, as a JSON producer would write them)."""

    def decode(self, value_format: str, topic: str, raw: bytes) -> object:
        """The value; :class:`relay.errors.DecodeError` when the record itself cannot be
        decoded (dead-lettered), :class:`relay.errors.RetriableError` when the registry
        cannot be reached (tried again, never dead-lettered)."""
        ...
