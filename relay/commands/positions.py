"""``relay positions``: what each relay partition's position is, and restoring lost ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relay.commands.run import check_environment, for_database, select_partitions
from relay.kafka.positions import read_positions
from relay.kafka.publisher import KafkaTransactionalPublisher
from relay.postgres.engine import make_engine
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.publishing.positions import RestoredPosition, restore_position
from relay.publishing.types import PositionOwner
from relay.settings.relay import RelaySettings


@dataclass(frozen=True, slots=True)
class PartitionPosition:
    partition: int
    position: int  # committed in Kafka (0: none)
    owner: PositionOwner | None  # who committed it (None: not recorded)
    floor: int  # recorded as published in the database


def show(
    settings: RelaySettings, partitions: Sequence[int] | None = None
) -> list[PartitionPosition]:
    """Each relay partition's committed position (read without fencing anything) and the
    database's floor."""
    engine = make_engine(settings.database_url, pool_size=1)
    try:
        selected = select_partitions(partitions, check_environment(settings, engine))
        settings, _ = for_database(settings, engine)
        source = PostgresOutboxSource(engine, settings.database_url)
        found = read_positions(settings, selected)
        return [
            PartitionPosition(p, found[p].position, found[p].owner, source.published_floor(p))
            for p in selected
        ]
    finally:
        engine.dispose()


def restore(
    settings: RelaySettings, partitions: Sequence[int] | None = None
) -> list[RestoredPosition]:
    """Commit the database's floor as the position of each partition whose position in
    Kafka is below it. Fences the relays running on those partitions: stop them first."""
    engine = make_engine(settings.database_url, pool_size=1)
    try:
        selected = select_partitions(partitions, check_environment(settings, engine))
        settings, owner = for_database(settings, engine)
        source = PostgresOutboxSource(engine, settings.database_url)
        restored = []
        for partition in selected:
            publisher = KafkaTransactionalPublisher(settings, partition, owner)
            try:
                restored.append(restore_position(partition, source, publisher, owner))
            finally:
                publisher.close()
        return restored
    finally:
        engine.dispose()
