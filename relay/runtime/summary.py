"""What a run did, partition by partition: one shape for every direction.

The forward relay reports a :class:`~relay.publishing.types.DrainResult` per relay
partition, the mirror a :class:`~relay.mirroring.types.PartitionStats` per Kafka
partition; both runs return a ``RunSummary`` of them and callers total a counter by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

PartitionResult = TypeVar("PartitionResult")


@dataclass(frozen=True, slots=True)
class RunSummary(Generic[PartitionResult]):
    partitions: tuple[PartitionResult, ...]

    def total(self, counter: str) -> int:
        """The sum of one counter (e.g. ``"records"``, ``"applied"``) over the partitions."""
        return sum(int(getattr(p, counter)) for p in self.partitions)
