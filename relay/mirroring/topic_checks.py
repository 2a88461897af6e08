"""The consume loop's checks of its topics against Kafka (:class:`TopicGuard`), tried
again as the loop's :class:`~relay.mirroring.attempts.Attempts` say; without a guard
(the core's tests) there are none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import partial

from relay.errors import OffsetOutOfRangeError, RetriableError
from relay.mirroring.attempts import Attempts
from relay.mirroring.cursors import PartitionCursor
from relay.mirroring.topic_guard import TopicGuard
from relay.mirroring.types import StoredOffset, TopicIdentity, TopicPartitionKey


@dataclass(frozen=True, slots=True)
class TopicChecks:
    guard: TopicGuard | None

    def assigned(
        self,
        attempts: Attempts,
        partitions: Sequence[TopicPartitionKey],
        stored: Mapping[TopicPartitionKey, StoredOffset],
    ) -> dict[str, TopicIdentity]:
        """The topics' identities, the stored offsets checked against them."""
        if self.guard is None:
            return {}
        return attempts.retried(
            partial(self.guard.assigned, partitions, stored), "describing topics"
        )

    def verified(self, attempts: Attempts, cursor: PartitionCursor) -> None:
        """Before a batch of ``cursor`` is decoded: its topic is still the one checked."""
        known = cursor.identity
        if self.guard is not None and known is not None:
            cursor.identity = attempts.retried(
                partial(self.guard.verify, cursor.topic, known, cursor.received),
                "describing topic",
            )

    def explain(self, gone: OffsetOutOfRangeError, cursor: PartitionCursor, now: float) -> None:
        """A position not in the log: when the topic was created again, say that instead."""
        if self.guard is not None and cursor.identity is not None:
            with suppress(RetriableError):  # Kafka did not answer: the position's error stands
                self.guard.verify(gone.topic, cursor.identity, now)
