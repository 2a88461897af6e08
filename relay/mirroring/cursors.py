"""The consume loop's bookkeeping of one Kafka partition (:mod:`relay.mirroring.loop`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from relay.mirroring.types import KafkaRecord, TopicIdentity


@dataclass(slots=True)
class PartitionCursor:
    """Where the consume loop is in one partition: what it stored, fetched and buffered,
    and the batch it has in the apply lane."""

    topic: str
    partition: int
    expected: int | None  # stored next offset (None: no row stored yet)
    fetched: int  # everything below this offset is buffered or applied
    target: int | None = None
    identity: TopicIdentity | None = None  # the topic as checked (None: no guard)
    buffer: list[KafkaRecord] = field(default_factory=list)
    since: float | None = None  # when the oldest unapplied record arrived
    received: float = 0.0  # when the latest record or partition end arrived
    applying: int | None = None  # the next offset its batch in the apply lane stores
    restarts: int = 0  # how often its buffer was dropped or given back (a lane's outcome)

    @property
    def stored(self) -> int:
        return 0 if self.expected is None else self.expected

    @property
    def base(self) -> int | None:
        """Where its next batch starts: after its batch in the lane, else the stored offset."""
        return self.expected if self.applying is None else self.applying

    def pending(self) -> bool:
        return bool(self.buffer) or self.fetched > (self.base or 0)

    def done(self) -> bool:
        return (
            self.target is not None
            and self.stored >= self.target
            and not self.buffer
            and self.applying is None
        )
