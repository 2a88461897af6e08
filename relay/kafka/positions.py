"""Reading the relay partitions' positions without taking any partition over."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from relay.errors import KafkaError
from relay.kafka.errors import kafka_reason
from relay.publishing.types import CommittedPosition, PositionOwner
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.relay import RelaySettings

_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)


def positions_consumer(settings: RelaySettings, *, stable: bool = True) -> Consumer:
    """A consumer of the positions group, which never joins it: it only reads committed
    offsets. ``stable`` (read_committed): a pending transactional commit is waited for;
    without, the last committed offset is read at once (read_uncommitted)."""
    return Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": settings.group,
            "isolation.level": "read_committed" if stable else "read_uncommitted",
            "enable.auto.commit": False,
        },
        logger=_librdkafka_log,
    )


def committed_position(tp: TopicPartition) -> CommittedPosition:
    """A positions-topic offset as a position (no offset, librdkafka's -1001: 0)."""
    if tp.offset <= 0:
        return CommittedPosition(0)
    return CommittedPosition(tp.offset, PositionOwner.from_stamp(tp.metadata))


def read_positions(
    settings: RelaySettings, partitions: Sequence[int]
) -> dict[int, CommittedPosition]:
    """The committed position of each relay partition, as a read_committed consumer of the
    positions group sees it (for display: a relay reads its own only after fencing)."""
    consumer = positions_consumer(settings)
    try:
        wanted = [TopicPartition(settings.positions_topic, p) for p in partitions]
        found = consumer.committed(wanted, timeout=settings.kafka.request_timeout_s)
    except KafkaException as exc:
        raise KafkaError(f"reading the committed positions failed: {kafka_reason(exc)}") from None
    finally:
        consumer.close()
    return {tp.partition: committed_position(tp) for tp in found}
