"""Putting a lost position back: the way out when the positions group's offsets expired or
were deleted (``relay positions restore``).

The database's floor (``outbox_published_floor``) is the highest position it recorded as
published after a Kafka commit. When Kafka's position is below it, the rows up to the
floor are in the topics already; committing the floor as the position, through the
partition's own transactional producer (which fences any relay still running on it), lets
the relay continue after them instead of publishing them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.errors import PositionsMismatchError
from relay.publishing.ports import OutboxSource, TransactionalPublisher
from relay.publishing.types import PositionOwner


@dataclass(frozen=True, slots=True)
class RestoredPosition:
    partition: int
    found: int  # Kafka's position before
    floor: int
    restored: bool  # False: Kafka's position was not below the floor, nothing to do


def restore_position(
    partition: int,
    source: OutboxSource,
    publisher: TransactionalPublisher,
    owner: PositionOwner,
) -> RestoredPosition:
    """Commit the database's floor as the partition's position if Kafka's is below it."""
    committed = publisher.fence()
    if committed.owner is not None and committed.owner.database_id != owner.database_id:
        raise PositionsMismatchError(
            f"relay partition {partition}: the positions group holds a position committed "
            f"for another outbox database ({committed.owner.database_id}); not touching it"
        )
    floor = source.published_floor(partition)
    if committed.position >= floor:
        return RestoredPosition(partition, committed.position, floor, restored=False)
    publisher.begin()
    publisher.commit(floor)
    return RestoredPosition(partition, committed.position, floor, restored=True)
