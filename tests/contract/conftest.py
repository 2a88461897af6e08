"""Shared pieces of the contract suites.

Each suite in this directory runs the same tests against the in-memory fake of a port
(id ``memory``) and against its real adapter (id ``postgres`` or ``kafka``). The real
variants are marked ``integration``: they need the servers that ``tests/conftest.py``
provides.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition

from relay.devenv.waiting import wait_until
from relay.postgres.engine import make_engine
from relay.runtime.secrets import Secret
from relay.settings.connections import KafkaSettings
from tests.integration.support import migrate

RELAY_PARTITIONS = 4
TIMEOUT_S = 20.0


def memory_and(real: str) -> list[Any]:
    """The parameters of a contract fixture: the fake, and the real adapter ``real``
    (an integration test)."""
    return [pytest.param("memory"), pytest.param(real, marks=pytest.mark.integration)]


@pytest.fixture
def migrated_database(database_url: str) -> str:
    """A fresh database with the relay's schema and 4 relay partitions."""
    migrate(database_url, RELAY_PARTITIONS)
    return database_url


@pytest.fixture
def engine(migrated_database: str) -> Iterator[sa.Engine]:
    engine = make_engine(Secret(migrated_database), pool_size=2)
    yield engine
    engine.dispose()


@pytest.fixture
def kafka_settings(bootstrap_servers: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers)


class Watermarks:
    """The last stable offset and the high watermark of topic partitions, read straight
    from the broker (not through the adapter under test), to wait for a transaction's
    markers: ``commit_transaction()`` returns before the broker has written them."""

    def __init__(self, bootstrap_servers: str) -> None:
        def consumer(isolation: str) -> Consumer:
            return Consumer(
                {
                    "bootstrap.servers": bootstrap_servers,
                    "group.id": f"contract-watermarks-{uuid.uuid4().hex}",
                    "isolation.level": isolation,
                }
            )

        self._committed = consumer("read_committed")
        self._uncommitted = consumer("read_uncommitted")

    def read(self, topic: str, partition: int) -> tuple[int, int]:
        """(last stable offset, high watermark)."""
        tp = TopicPartition(topic, partition)
        _, stable = self._committed.get_watermark_offsets(tp, timeout=10, cached=False)
        _, high = self._uncommitted.get_watermark_offsets(tp, timeout=10, cached=False)
        return int(stable), int(high)

    def wait_for(self, topic: str, partition: int, stable: int, high: int) -> None:
        wait_until(
            lambda: self.read(topic, partition) == (stable, high),
            TIMEOUT_S,
            f"{topic}[{partition}] to reach last stable offset {stable}, high watermark {high}",
        )

    def wait_settled(self, topic: str, partition: int) -> None:
        """Until no transaction is open on the partition (its markers are written)."""

        def settled() -> bool:
            stable, high = self.read(topic, partition)
            return stable == high

        wait_until(settled, TIMEOUT_S, f"the transactions on {topic}[{partition}] to settle")

    def close(self) -> None:
        self._committed.close()
        self._uncommitted.close()


@pytest.fixture
def watermarks(bootstrap_servers: str) -> Iterator[Watermarks]:
    marks = Watermarks(bootstrap_servers)
    yield marks
    marks.close()
