"""Interfaces the core needs; PostgreSQL and Kafka implement them at the edges."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from relay.publishing.types import OutboxRecord


class OutboxSource(Protocol):
    """Committed outbox rows of one relay partition, in seq order."""

    def high_water(self, partition: int) -> int:
        """The largest seq committed in ``partition`` so far (0 when none)."""
        ...

    def fetch(
        self, partition: int, after_seq: int, limit: int, up_to_seq: int | None = None
    ) -> Sequence[OutboxRecord]:
        """Up to ``limit`` rows with ``after_seq < seq [<= up_to_seq]``, ascending seq."""
        ...

    def last_assigned_seq(self) -> int:
        """The largest seq this database ever handed out, in any partition (0 when none)."""
        ...

    def dead_letter(self, partition: int, outbox_ids: Sequence[int], error: str) -> int:
        """Move rows Kafka refuses for good to the dead-letter table, with ``error``,
        in one transaction. Returns how many moved."""
        ...

    def delete_published(self, partition: int, up_to_seq: int) -> int:
        """Housekeeping: remove rows with ``seq <= up_to_seq``. Returns how many."""
        ...


class TransactionalPublisher(Protocol):
    """One relay partition's transactional producer and its committed position.

    :meth:`fence` is the only way to learn the position, and it fences first: the
    position is never read before this instance owns the partition (I3, docs/invariants.md).
    """

    def fence(self) -> int:
        """Take over the partition (aborting and fencing any previous owner's
        transaction), then return the committed position: the seq of the last row
        published, 0 when none."""
        ...

    def begin(self) -> None: ...

    def send(self, records: Sequence[OutboxRecord]) -> None:
        """Queue ``records`` in the open transaction, without waiting per record."""
        ...

    def commit(self, position: int) -> None:
        """Commit the open transaction together with the new ``position``.

        Raises ProducerFencedError when another instance took over, RetriableError when
        the transaction was aborted and the batch may be sent again."""
        ...

    def abort(self) -> None: ...

    def close(self) -> None: ...
