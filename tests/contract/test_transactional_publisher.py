"""Contract of :class:`relay.publishing.ports.TransactionalPublisher`: the in-memory
``MemoryKafka`` publishers and ``KafkaTransactionalPublisher`` on the real broker.

What a read_committed consumer of a destination topic sees is read back by outbox id (the
``outbox-id`` header for the broker); a relay partition's position only through
:meth:`fence` of a new instance, the one way the port offers.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Protocol

import pytest

from relay.devenv.reader import read_committed
from relay.errors import ProducerFencedError, TopicMissingError, UndeliverableEventError
from relay.kafka.publisher import KafkaTransactionalPublisher
from relay.publishing.ports import TransactionalPublisher
from relay.publishing.types import CommittedPosition, OutboxRecord
from relay.runtime.heartbeat import HEARTBEAT_HEADER, Heartbeat, decode_heartbeat
from relay.runtime.secrets import Secret
from relay.settings.connections import Connections, KafkaSettings
from relay.settings.relay import RelaySettings
from tests.contract.conftest import TIMEOUT_S, Watermarks, memory_and
from tests.fakes.publishing import OWNER, MemoryKafka, MemoryTopic

SMALL_LIMIT = 1000


def rec(n: int, topic: str, *, key: bytes | None = b"key", size: int = 10) -> OutboxRecord:
    """Outbox row ``n`` (id and seq ``n``) of relay partition 0 with a ``size``-byte value."""
    return OutboxRecord(n, 0, n, topic, key, b"v" * size, "Created", (("trace-id", b"t"),))


class PublisherHarness(Protocol):
    topic: str
    """A destination topic that exists and accepts every record of the tests."""

    def publisher(self, partition: int) -> TransactionalPublisher:
        """A new instance for relay ``partition`` (closed after the test)."""
        ...

    def missing_topic(self) -> str: ...

    def limited_topic(self, max_message_bytes: int) -> str: ...

    def compacted_topic(self) -> str: ...

    def published(self, topic: str) -> list[int]:
        """Outbox ids of the committed records of ``topic``, in offset order."""
        ...

    def heartbeat_topic(self, partitions: int) -> str: ...

    def heartbeats(self, topic: str) -> list[tuple[int, Heartbeat]]:
        """(partition, heartbeat) of the committed heartbeats of ``topic``, by partition."""
        ...


class MemoryHarness:
    def __init__(self) -> None:
        self.topic = "orders"
        self.kafka = MemoryKafka(topics={self.topic: MemoryTopic()})

    def publisher(self, partition: int) -> TransactionalPublisher:
        return self.kafka.publisher(partition)

    def missing_topic(self) -> str:
        return "missing"

    def limited_topic(self, max_message_bytes: int) -> str:
        assert self.kafka.topics is not None
        self.kafka.topics["limited"] = MemoryTopic(max_message_bytes=max_message_bytes)
        return "limited"

    def compacted_topic(self) -> str:
        assert self.kafka.topics is not None
        self.kafka.topics["compacted"] = MemoryTopic(compacted=True)
        return "compacted"

    def published(self, topic: str) -> list[int]:
        return [r.id for r in self.kafka.committed if r.topic == topic]

    def heartbeat_topic(self, partitions: int) -> str:
        assert self.kafka.topics is not None
        self.kafka.topics["beats"] = MemoryTopic(partitions=partitions)
        return "beats"

    def heartbeats(self, topic: str) -> list[tuple[int, Heartbeat]]:
        assert self.kafka.topics is not None
        found = [
            (partition, beat)
            for topics, beat, _ in self.kafka.heartbeats
            if topic in topics
            for partition in range(self.kafka.topics[topic].partitions)
        ]
        return sorted(found, key=lambda pair: pair[0])


class KafkaHarness:
    def __init__(
        self, kafka: KafkaSettings, make_topic: Callable[..., str], watermarks: Watermarks
    ) -> None:
        unique = uuid.uuid4().hex[:12]
        self.settings = RelaySettings(
            connections=Connections(Secret("postgresql+psycopg://unused@localhost/unused"), kafka),
            transactional_id_prefix=f"contract-{unique}",
            positions_topic=make_topic("contract-positions", partitions=2),
            positions_group=f"contract-positions-{unique}",
        )
        self._make_topic = make_topic
        self._watermarks = watermarks
        self.topic = make_topic("contract-orders")
        self.publishers: list[KafkaTransactionalPublisher] = []

    def publisher(self, partition: int) -> TransactionalPublisher:
        publisher = KafkaTransactionalPublisher(self.settings, partition, OWNER)
        self.publishers.append(publisher)
        return publisher

    def missing_topic(self) -> str:
        return f"contract-missing-{uuid.uuid4().hex[:12]}"

    def limited_topic(self, max_message_bytes: int) -> str:
        return self._make_topic(
            "contract-limited", config={"max.message.bytes": str(max_message_bytes)}
        )

    def compacted_topic(self) -> str:
        return self._make_topic("contract-compacted", config={"cleanup.policy": "compact"})

    def published(self, topic: str) -> list[int]:
        # commit_transaction() returns before the broker wrote the markers: read once
        # no transaction is open any more, up to the last stable offset.
        self._watermarks.wait_settled(topic, 0)
        records = read_committed(
            self.settings.kafka.bootstrap_servers, topic, TIMEOUT_S, {"fetch.wait.max.ms": "10"}
        )
        return [r.outbox_id for r in records if HEARTBEAT_HEADER not in r.headers]

    def heartbeat_topic(self, partitions: int) -> str:
        return self._make_topic("contract-beats", partitions=partitions)

    def heartbeats(self, topic: str) -> list[tuple[int, Heartbeat]]:
        self._watermarks.wait_settled(topic, 0)
        records = read_committed(
            self.settings.kafka.bootstrap_servers, topic, TIMEOUT_S, {"fetch.wait.max.ms": "10"}
        )
        found = []
        for r in records:
            if HEARTBEAT_HEADER in r.headers:
                beat = decode_heartbeat(r.value)
                assert beat is not None and r.key == beat.key
                found.append((r.partition, beat))
        return found

    def close(self) -> None:
        for publisher in self.publishers:
            publisher.close()


@pytest.fixture(params=memory_and("kafka"))
def kafka(request: pytest.FixtureRequest) -> Iterator[PublisherHarness]:
    if request.param == "memory":
        yield MemoryHarness()
        return
    harness = KafkaHarness(
        request.getfixturevalue("kafka_settings"),
        request.getfixturevalue("make_topic"),
        request.getfixturevalue("watermarks"),
    )
    yield harness
    harness.close()


def publish(publisher: TransactionalPublisher, records: list[OutboxRecord]) -> None:
    """One transaction: ``records`` and the position of the last one."""
    publisher.begin()
    publisher.send(records)
    publisher.commit(records[-1].seq)


def test_a_new_partition_has_position_zero(kafka: PublisherHarness) -> None:
    assert kafka.publisher(0).fence().position == 0
    assert kafka.publisher(1).fence().position == 0
    assert kafka.published(kafka.topic) == []


def test_commit_publishes_the_records_together_with_the_position(
    kafka: PublisherHarness,
) -> None:
    publisher = kafka.publisher(0)
    assert publisher.fence().position == 0
    publisher.begin()
    publisher.send([rec(1, kafka.topic), rec(2, kafka.topic)])
    publisher.send([rec(3, kafka.topic)])
    publisher.commit(3)
    publish(publisher, [rec(4, kafka.topic)])
    assert kafka.published(kafka.topic) == [1, 2, 3, 4]
    assert kafka.publisher(0).fence().position == 4
    assert kafka.publisher(1).fence().position == 0  # positions are per relay partition


def test_abort_publishes_nothing_and_keeps_the_position(kafka: PublisherHarness) -> None:
    publisher = kafka.publisher(0)
    publisher.fence()
    publish(publisher, [rec(1, kafka.topic), rec(2, kafka.topic)])
    publisher.begin()
    publisher.send([rec(3, kafka.topic), rec(4, kafka.topic)])
    publisher.abort()
    assert kafka.published(kafka.topic) == [1, 2]
    successor = kafka.publisher(0)
    assert successor.fence().position == 2
    # The aborted batch, sent again, is published once.
    publish(successor, [rec(3, kafka.topic), rec(4, kafka.topic)])
    assert kafka.published(kafka.topic) == [1, 2, 3, 4]
    assert kafka.publisher(0).fence().position == 4


def test_the_same_instance_continues_after_an_abort(kafka: PublisherHarness) -> None:
    publisher = kafka.publisher(0)
    publisher.fence()
    publisher.begin()
    publisher.send([rec(1, kafka.topic)])
    publisher.abort()
    publish(publisher, [rec(1, kafka.topic), rec(2, kafka.topic)])
    assert kafka.published(kafka.topic) == [1, 2]
    assert kafka.publisher(0).fence().position == 2


def test_fencing_aborts_the_previous_owners_open_transaction(kafka: PublisherHarness) -> None:
    zombie = kafka.publisher(0)
    zombie.fence()
    zombie.begin()
    zombie.send([rec(1, kafka.topic)])
    successor = kafka.publisher(0)
    assert successor.fence().position == 0
    with pytest.raises(ProducerFencedError):
        zombie.commit(1)
    assert kafka.published(kafka.topic) == []
    publish(successor, [rec(1, kafka.topic)])
    assert kafka.published(kafka.topic) == [1]
    assert kafka.publisher(0).fence().position == 1


def test_a_fenced_instance_learns_it_at_commit_and_then_refuses_everything(
    kafka: PublisherHarness,
) -> None:
    zombie = kafka.publisher(0)
    zombie.fence()
    publish(zombie, [rec(1, kafka.topic)])
    successor = kafka.publisher(0)
    assert successor.fence().position == 1
    # Nothing tells the old instance before it commits: begin and send still work.
    zombie.begin()
    zombie.send([rec(2, kafka.topic)])
    with pytest.raises(ProducerFencedError):
        zombie.commit(2)
    with pytest.raises(ProducerFencedError):
        zombie.begin()
    with pytest.raises(ProducerFencedError):
        zombie.abort()
    publish(successor, [rec(2, kafka.topic), rec(3, kafka.topic)])
    assert kafka.published(kafka.topic) == [1, 2, 3]
    assert kafka.publisher(0).fence().position == 3


def test_fencing_again_does_not_take_the_partition_back(kafka: PublisherHarness) -> None:
    first = kafka.publisher(0)
    first.fence()
    successor = kafka.publisher(0)
    successor.fence()
    # A retried start-up of the first instance: its producer initialised its
    # transactions once, so a second fence() only reads the position (if anything).
    with contextlib.suppress(ProducerFencedError):
        first.fence()
    publish(successor, [rec(1, kafka.topic)])
    first.begin()
    first.send([rec(2, kafka.topic)])
    with pytest.raises(ProducerFencedError):
        first.commit(2)
    assert kafka.published(kafka.topic) == [1]
    assert kafka.publisher(0).fence().position == 1


def test_a_missing_topic_fails_the_send_and_sends_nothing(kafka: PublisherHarness) -> None:
    publisher = kafka.publisher(0)
    publisher.fence()
    publisher.begin()
    with pytest.raises(TopicMissingError):
        publisher.send([rec(1, kafka.topic), rec(2, kafka.missing_topic())])
    publisher.abort()
    assert kafka.published(kafka.topic) == []
    assert kafka.publisher(0).fence().position == 0


def test_records_a_topic_never_accepts_are_refused_by_outbox_id(
    kafka: PublisherHarness,
) -> None:
    limited = kafka.limited_topic(SMALL_LIMIT)
    publisher = kafka.publisher(0)
    publisher.fence()
    publisher.begin()
    batch = [
        rec(1, limited),
        rec(2, limited, size=3 * SMALL_LIMIT),
        rec(3, limited),
        rec(4, limited, key=None, size=2 * SMALL_LIMIT),
    ]
    with pytest.raises(UndeliverableEventError) as refused:
        publisher.send(batch)
    assert refused.value.outbox_ids == (2, 4)
    assert "max.message.bytes" in refused.value.reason
    publisher.abort()
    assert kafka.published(limited) == []
    # What the relay does next: the refused rows go to the dead letters, the rest is
    # published in the next transaction.
    publish(publisher, [batch[0], batch[2]])
    assert kafka.published(limited) == [1, 3]
    assert kafka.publisher(0).fence().position == 3


def test_a_compacted_topic_refuses_records_without_key(kafka: PublisherHarness) -> None:
    compacted = kafka.compacted_topic()
    publisher = kafka.publisher(0)
    publisher.fence()
    publisher.begin()
    with pytest.raises(UndeliverableEventError) as refused:
        publisher.send([rec(1, compacted), rec(2, compacted, key=None)])
    assert refused.value.outbox_ids == (2,)
    publisher.abort()
    publish(publisher, [rec(1, compacted)])
    assert kafka.published(compacted) == [1]


def test_a_committed_position_carries_its_owner(kafka: PublisherHarness) -> None:
    publisher = kafka.publisher(0)
    publisher.fence()
    publish(publisher, [rec(1, kafka.topic)])
    assert kafka.publisher(0).fence() == CommittedPosition(1, OWNER)


def test_a_transaction_without_records_commits_the_position_again(
    kafka: PublisherHarness,
) -> None:
    publisher = kafka.publisher(0)
    publisher.fence()
    publish(publisher, [rec(1, kafka.topic), rec(2, kafka.topic)])
    publisher.begin()
    publisher.commit(2)  # keep-alive: nothing sent
    assert kafka.publisher(0).fence() == CommittedPosition(2, OWNER)
    assert kafka.published(kafka.topic) == [1, 2]


def test_a_reset_drops_the_open_transaction_and_fencing_again_reads_the_position(
    kafka: PublisherHarness,
) -> None:
    publisher = kafka.publisher(0)
    publisher.fence()
    publish(publisher, [rec(1, kafka.topic), rec(2, kafka.topic)])
    publisher.begin()
    publisher.send([rec(3, kafka.topic), rec(4, kafka.topic)])  # in doubt, never committed
    publisher.reset()
    assert publisher.fence().position == 2
    publish(publisher, [rec(3, kafka.topic), rec(4, kafka.topic)])
    assert kafka.published(kafka.topic) == [1, 2, 3, 4]
    assert kafka.publisher(0).fence().position == 4


def test_a_reset_after_a_commit_reads_the_committed_position(kafka: PublisherHarness) -> None:
    publisher = kafka.publisher(0)
    publisher.fence()
    publish(publisher, [rec(1, kafka.topic)])
    publisher.reset()
    assert publisher.fence().position == 1
    publish(publisher, [rec(2, kafka.topic)])
    assert kafka.published(kafka.topic) == [1, 2]


def test_a_reset_instance_fences_its_successor_only_when_it_fences_again(
    kafka: PublisherHarness,
) -> None:
    # A new producer with the same transactional.id takes the partition over again: the
    # relay resets only after a commit in doubt, never after ProducerFencedError.
    publisher = kafka.publisher(0)
    publisher.fence()
    successor = kafka.publisher(0)
    successor.fence()
    publisher.reset()
    publisher.fence()
    successor.begin()
    successor.send([rec(1, kafka.topic)])
    with pytest.raises(ProducerFencedError):
        successor.commit(1)
    publish(publisher, [rec(1, kafka.topic)])
    assert kafka.published(kafka.topic) == [1]


def test_heartbeats_go_to_every_partition_with_their_transaction(kafka: PublisherHarness) -> None:
    beats = kafka.heartbeat_topic(partitions=2)
    publisher = kafka.publisher(0)
    publisher.fence()
    aborted, committed = (
        Heartbeat(OWNER.database_id, 0, 4, 1_000),
        Heartbeat(OWNER.database_id, 0, 4, 2_000),
    )
    publisher.begin()
    publisher.send([rec(1, beats)])
    publisher.send_heartbeats([beats], aborted)
    publisher.abort()
    publisher.begin()
    publisher.send([rec(2, beats)])
    publisher.send_heartbeats([beats], committed)
    publisher.commit(2)
    assert kafka.heartbeats(beats) == [(0, committed), (1, committed)]
    assert kafka.published(beats) == [2]


def test_a_missing_heartbeat_topic_fails_the_transaction(kafka: PublisherHarness) -> None:
    publisher = kafka.publisher(0)
    publisher.fence()
    publisher.begin()
    with pytest.raises(TopicMissingError):
        publisher.send_heartbeats([kafka.missing_topic()], Heartbeat(OWNER.database_id, 0, 4, 1))
    publisher.abort()
    assert kafka.publisher(0).fence().position == 0
