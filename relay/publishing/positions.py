"""A relay partition's committed position: checked at start-up, and put back when the
positions group's offsets expired or were deleted (``relay positions restore``).

At start-up (after fencing) the position is refused when another outbox database or
another transactional-id prefix committed it, when it is beyond any seq this database
assigned, or when it is below the floor this database recorded.

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
from relay.publishing.types import CommittedPosition, PositionOwner


def checked_position(
    partition: int,
    committed: CommittedPosition,
    owner: PositionOwner,
    *,
    assigned: int,
    floor: int,
) -> int:
    """``committed``'s position, after the start-up checks against this relay's ``owner``,
    the highest seq the database ``assigned`` and its recorded ``floor``."""
    _check_owner(partition, committed.owner, owner)
    position = committed.position
    if position > assigned:
        raise PositionsMismatchError(
            f"relay partition {partition}: the positions group says seq {position} "
            f"was published, but this database never assigned a seq above {assigned}; "
            "the positions group belongs to another outbox database "
            "(set RELAY_POSITIONS_GROUP to a group of this database's own)"
        )
    if position < floor:
        raise PositionsMismatchError(
            f"relay partition {partition}: the positions group holds position "
            f"{position}, below what this database recorded as published (seq {floor}): "
            "its offsets expired or were deleted, and using them would publish rows "
            "again. Check that the topics hold the rows up to that seq, then run "
            "`relay positions restore` (docs/operations.md)"
        )
    return position


def _check_owner(partition: int, found: PositionOwner | None, owner: PositionOwner) -> None:
    if found is None or found == owner:
        return  # None: committed before owners were recorded; the next commit adds it
    if found.database_id != owner.database_id:
        raise PositionsMismatchError(
            f"relay partition {partition}: the position in the positions group was "
            f"committed for another outbox database ({found.database_id}, this one is "
            f"{owner.database_id}); give each database a positions group of its "
            "own (RELAY_POSITIONS_GROUP), or leave it and the prefix unset to use the "
            "database's defaults"
        )
    raise PositionsMismatchError(
        f"relay partition {partition}: the positions group is used by relays with "
        f"transactional-id prefix {found.transactional_id_prefix!r}, this one has "
        f"{owner.transactional_id_prefix!r}; relays with different prefixes do not "
        "fence each other, so they must not share a positions group"
    )


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
