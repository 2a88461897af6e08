"""Small value types shared by the core and its adapters."""

from __future__ import annotations

from dataclasses import dataclass

from relay.runtime.stamps import read_stamp, stamp

Headers = tuple[tuple[str, bytes | None], ...]  # a None value: a null Kafka header


@dataclass(slots=True)
class OutboxRecord:
    """One committed outbox row, as the relay publishes it. Treated as immutable (changed
    only through ``dataclasses.replace``) but not frozen: a frozen class's ``__init__`` sets
    each field through ``object.__setattr__``, four times the cost per row at a drain's
    tens of thousands of rows a second."""

    id: int
    partition: int
    seq: int
    topic: str
    key: bytes | None
    value: bytes | None
    event_type: str | None
    headers: Headers
    # The event time: the row's created_at in milliseconds since the epoch, published as
    # the record's Kafka timestamp; 0 lets the producer stamp the record when it sends it.
    timestamp_ms: int = 0
    # The id of the first dead letter of the same key, when the row comes after one: the
    # row must follow it to outbox_dead_letters rather than overtake it (I2).
    follows: int | None = None
    # When the row's transaction committed, in milliseconds since the epoch (its marker's
    # committed_at, 0013_commit_time); 0: not known (a row sequenced before it).
    committed_ms: int = 0


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What one Kafka transaction published for one relay partition."""

    partition: int
    records: int
    first_seq: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What a relay partition published during one run."""

    partition: int
    records: int
    batches: int
    position: int


@dataclass(frozen=True, slots=True)
class PositionOwner:
    """Whose positions these are: the outbox database and the transactional-id prefix of
    its relays. Every position the relay commits carries it (the offset's metadata), and
    a position read back with another owner is refused (I3, docs/invariants.md)."""

    database_id: str
    transactional_id_prefix: str

    def stamp(self, **extra: str) -> str:
        """The offset metadata written with each position; ``extra``: more fields (who
        committed it), which readers of the owner ignore."""
        return stamp(db=self.database_id, prefix=self.transactional_id_prefix, **extra)

    @classmethod
    def from_stamp(cls, text: str | None) -> PositionOwner | None:
        """The owner in a position's metadata; None when there is none (a position
        committed before owners were recorded) or it is not ours to read."""
        found = read_stamp(text, ("db", "prefix"))
        return None if found is None else cls(*found)


@dataclass(frozen=True, slots=True)
class CommittedPosition:
    """A relay partition's position as Kafka holds it: the seq of the last row published
    (0 when none) and who committed it (None: not recorded)."""

    position: int
    owner: PositionOwner | None = None


@dataclass(frozen=True, slots=True)
class OutboxIdentity:
    """The outbox database's identity (``outbox_identity``, created by the migrations)."""

    database_id: str
    default_prefix: str
    """The transactional-id prefix its relays use unless told otherwise."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What the outbox vouches for about a relay partition (``outbox_horizon_as_of``):
    every row of it whose transaction committed before ``as_of_ms`` (milliseconds since
    the epoch, on the database's clock) is at a position at or below ``top``. Once the
    relay's committed position reaches ``top``, each of those events is in Kafka, and a
    heartbeat may say the partition is complete through ``as_of_ms``. ``partitions``: the
    relay partition count then."""

    top: int
    as_of_ms: int
    partitions: int
