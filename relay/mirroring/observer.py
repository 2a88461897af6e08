"""What the mirror's consume loop tells an observer (metrics, readiness)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from relay.mirroring.types import TopicPartitionKey


class LoopObserver(Protocol):
    """Told what the loop does, for metrics and readiness
    (relay.runtime.metrics.MirrorMetrics); it changes nothing the loop does."""

    def positioned(self, offsets: Mapping[TopicPartitionKey, int | None]) -> None:
        """These partitions are this loop's, at these stored offsets (None: nothing
        stored): on assignment, and after an offset conflict."""

    def revoked(self, partitions: Sequence[TopicPartitionKey]) -> None:
        """These partitions are no longer this loop's."""

    def applied(
        self,
        tp: TopicPartitionKey,
        records: int,
        dead_letters: int,
        next_offset: int,
        event_times_ms: Sequence[int] = (),
    ) -> None:
        """A batch committed just now: ``records`` applied, ``dead_letters``
        dead-lettered; ``event_times_ms``: the Kafka timestamp of each of its records."""

    def retrying(self) -> None:
        """A database call failed with a transient error, or a batch waits for a record
        to heal; either is tried again."""

    def resumed(self) -> None:
        """A database call succeeded after failing."""


class Unobserved:
    def positioned(self, offsets: Mapping[TopicPartitionKey, int | None]) -> None:
        pass

    def revoked(self, partitions: Sequence[TopicPartitionKey]) -> None:
        pass

    def applied(
        self,
        tp: TopicPartitionKey,
        records: int,
        dead_letters: int,
        next_offset: int,
        event_times_ms: Sequence[int] = (),
    ) -> None:
        pass

    def retrying(self) -> None:
        pass

    def resumed(self) -> None:
        pass
