"""``relay positions``: what each relay partition's position is, restoring lost ones, and
setting one by hand."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TypeVar

from relay.commands.startup import (
    check_environment,
    for_database,
    refuse_beside_process_members,
    select_partitions,
)
from relay.errors import ConfigurationError, PositionsMismatchError, RelayError, RetriableError
from relay.kafka.positions import read_positions
from relay.kafka.publisher import KafkaTransactionalPublisher
from relay.postgres.engine import Database, open_database
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.postgres.published_floor import set_published_floor
from relay.publishing.positions import RestoredPosition, restore_position
from relay.publishing.types import CommittedPosition, PositionOwner
from relay.settings.relay import RelaySettings

_Result = TypeVar("_Result")


@dataclass(frozen=True, slots=True)
class PartitionPosition:
    partition: int
    position: int  # committed in Kafka (0: none)
    owner: PositionOwner | None  # who committed it (None: not recorded)
    floor: int  # recorded as published in the database


@dataclass(frozen=True, slots=True)
class PositionSet:
    """What ``relay positions set`` changed."""

    partition: int
    found: int  # Kafka's position before (read after fencing)
    floor: int  # the database's floor before
    position: int  # the position committed, and the floor now


@dataclass(frozen=True, slots=True)
class _Session:
    """The start-up checks passed: ``settings`` with the database's defaults, the owner
    every position carries, and the selected partitions."""

    settings: RelaySettings
    owner: PositionOwner
    database: Database
    source: PostgresOutboxSource
    partitions: list[int]

    def fenced(self, step: Callable[[int, KafkaTransactionalPublisher], _Result]) -> list[_Result]:
        """``step`` for each partition, with the partition's own transactional producer
        (which fences the relay running on it, if any, as soon as ``step`` fences)."""
        results = []
        for partition in self.partitions:
            publisher = KafkaTransactionalPublisher(self.settings, partition, self.owner)
            try:
                results.append(step(partition, publisher))
            finally:
                publisher.close()
        return results


@contextmanager
def _session(settings: RelaySettings, partitions: Sequence[int] | None) -> Iterator[_Session]:
    database = open_database(settings.database_url, pool_size=1)
    try:
        selected = select_partitions(partitions, check_environment(settings, database))
        settings, owner = for_database(settings, database)
        source = PostgresOutboxSource(database)
        yield _Session(settings, owner, database, source, selected)
    finally:
        database.dispose()


def show(
    settings: RelaySettings, partitions: Sequence[int] | None = None
) -> list[PartitionPosition]:
    """Each relay partition's committed position (read without fencing anything) and the
    database's floor."""
    with _session(settings, partitions) as session:
        found = read_positions(session.settings, session.partitions)
        return [
            PartitionPosition(
                p, found[p].position, found[p].owner, session.source.published_floor(p)
            )
            for p in session.partitions
        ]


def restore(
    settings: RelaySettings, partitions: Sequence[int] | None = None
) -> list[RestoredPosition]:
    """Commit the database's floor as the position of each partition whose position in
    Kafka is below it. Fences the relays running on those partitions (with
    --partition-transactions, or runs of their own): stop them first. Refused while
    `relay run` processes with one transaction per process run (nothing fences them)."""
    with _session(settings, partitions) as session:
        refuse_beside_process_members(
            session.settings, "relay positions restore", "their next commit would undo it"
        )
        return session.fenced(
            lambda partition, publisher: restore_position(
                partition, session.source, publisher, session.owner
            )
        )


def set_warning(partition: int, position: int) -> str:
    """What setting ``position`` by hand does to the rows of ``partition``."""
    return (
        f"warning: rows of relay partition {partition} at or below seq {position} that are "
        f"not in Kafka yet will never be published, and rows above seq {position} that are "
        "in Kafka already will be published again (those still in the outbox: kept with "
        "--no-cleanup, or not published yet); a relay running on the partition is fenced "
        "and stops (exit 5)"
    )


def set_position(settings: RelaySettings, partition: int, position: int) -> PositionSet:
    """Commit ``position`` as the partition's position and make it the database's floor,
    lower or higher than before.

    It takes the partition over as a relay does (``init_transactions`` on its
    transactional id, then the position committed in a Kafka transaction with the owner
    stamp), so a relay running on it is fenced instead of overwriting it; refused while
    `relay run` processes with one transaction per process run, which nothing but their
    generation fences. The floor is lowered before the Kafka commit and set after it: a
    failure in between leaves the floor at or below Kafka's position, which the relay
    accepts, and the command can run again."""
    if position < 0:
        raise ConfigurationError(f"a position is 0 or more, got {position}")
    with _session(settings, [partition]) as session:
        refuse_beside_process_members(
            session.settings, "relay positions set", "their next commit would undo it"
        )

        def step(p: int, publisher: KafkaTransactionalPublisher) -> PositionSet:
            committed = publisher.fence()
            _check_owner(p, committed, session.owner)
            assigned = session.source.last_assigned_seq()
            if position > assigned:
                raise ConfigurationError(
                    f"relay partition {p}: position {position} is beyond anything this "
                    f"database assigned (seq {assigned}); the relay would refuse it"
                )
            floor = session.source.published_floor(p)
            set_published_floor(session.database, p, position, only_lower=True)
            publisher.begin()
            try:
                publisher.commit(position)
            except RetriableError:
                # An outcome the producer no longer knows cannot be aborted; the next
                # fence of the partition (a relay, this command again) settles it.
                with suppress(RelayError):
                    publisher.abort()
                raise
            set_published_floor(session.database, p, position)
            return PositionSet(p, committed.position, floor, position)

        (changed,) = session.fenced(step)
        return changed


def _check_owner(partition: int, committed: CommittedPosition, owner: PositionOwner) -> None:
    """A position of another database, or of relays with another prefix (which this
    producer does not fence), is not this command's to overwrite."""
    found = committed.owner
    if found is None or found == owner:
        return
    if found.database_id != owner.database_id:
        whose = f"for another outbox database ({found.database_id})"
    else:
        whose = f"by relays with transactional-id prefix {found.transactional_id_prefix!r}"
    raise PositionsMismatchError(
        f"relay partition {partition}: the positions group holds a position committed "
        f"{whose}; not touching it (check --positions-group and --transactional-id-prefix)"
    )
