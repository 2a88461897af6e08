"""Checks a batch against its destination topics before anything is produced.

A missing topic is a retriable condition: its rows wait in the outbox until it exists.
A record the topic can never accept (larger than ``max.message.bytes`` on its own, or a
null key on a compacted topic) is refused up front by outbox id, so the relay can move
exactly that row to the dead-letter table instead of failing the batch for ever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType

from relay.errors import RetriableError, TopicMissingError
from relay.kafka.errors import translate
from relay.publishing.types import OutboxRecord

log = logging.getLogger(__name__)

TOPIC_MISSING = frozenset(
    {
        LibKafkaError.UNKNOWN_TOPIC_OR_PART,
        LibKafkaError._UNKNOWN_TOPIC,
        LibKafkaError._UNKNOWN_PARTITION,
    }
)
# Record batch v2: the batch header, and a record's fixed attribute byte.
_BATCH_OVERHEAD = 61


@dataclass(frozen=True, slots=True)
class TopicLimits:
    max_message_bytes: int | None
    compacted: bool


@dataclass(frozen=True, slots=True)
class BatchCheck:
    """What :meth:`TopicGuard.check` found in a batch."""

    refused: dict[int, str]
    """Outbox ids the topics can never accept, with the reason."""
    sizes: dict[int, int]
    """:func:`single_record_batch_size` of each record whose topic has a known limit."""


def _varint_size(value: int) -> int:
    zigzag = (value << 1) ^ (value >> 63)
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


HeaderList = Sequence[tuple[str, str | bytes | None]]


def _field_size(data: str | bytes | None) -> int:
    if data is None:
        return _varint_size(-1)
    raw = data.encode() if isinstance(data, str) else data
    return _varint_size(len(raw)) + len(raw)


def single_record_batch_size(key: bytes | None, value: bytes | None, headers: HeaderList) -> int:
    """Bytes of an uncompressed v2 record batch holding only this record."""
    body = 1 + 1 + 1  # attributes, timestamp delta 0, offset delta 0
    body += _field_size(key) + _field_size(value) + _varint_size(len(headers))
    for name, data in headers:
        body += _field_size(name) + _field_size(data)
    return _BATCH_OVERHEAD + _varint_size(body) + body


class TopicGuard:
    """Per-publisher cache of what each destination topic accepts.

    ``admin`` creates the AdminClient that reads topic configurations, on first need."""

    def __init__(
        self,
        producer: Producer,
        admin: Callable[[], AdminClient],
        partition: int,
        timeout: float,
    ) -> None:
        self._producer = producer
        self._new_admin = admin
        self._admin: AdminClient | None = None
        self._partition = partition
        self._timeout = timeout
        self._limits: dict[str, TopicLimits] = {}

    def max_message_bytes(self, topic: str) -> int | None:
        """The topic's limit, once :meth:`check` has looked it up."""
        limits = self._limits.get(topic)
        return None if limits is None else limits.max_message_bytes

    def forget(self, topic: str) -> None:
        self._limits.pop(topic, None)

    def forget_all(self) -> None:
        """Read every topic's limits again before the next batch (the broker refused a
        record batch: a limit was lowered since it was read)."""
        self._limits.clear()

    def check(
        self, records: Sequence[OutboxRecord], headers_of: Mapping[int, HeaderList]
    ) -> BatchCheck:
        """The records the topics can never accept, and the sizes measured to find them.
        Raises TopicMissingError when a topic does not exist."""
        refused: dict[int, str] = {}
        sizes: dict[int, int] = {}
        fresh: set[str] = set()  # topics whose limits were read during this check
        for record in records:
            limits = self._limits.get(record.topic)
            if limits is None:
                limits = self._load(record.topic, records)
                fresh.add(record.topic)
            reason = self._refusal(record, limits, headers_of, sizes)
            if reason is not None and record.topic not in fresh:
                # Refuse for good only on limits read now: the topic may accept more since.
                limits = self._load(record.topic, records)
                fresh.add(record.topic)
                reason = self._refusal(record, limits, headers_of, sizes)
            if reason is not None:
                refused[record.id] = reason
        return BatchCheck(refused, sizes)

    @staticmethod
    def _refusal(
        record: OutboxRecord,
        limits: TopicLimits,
        headers_of: Mapping[int, HeaderList],
        sizes: dict[int, int],
    ) -> str | None:
        """Why the topic can never accept ``record``, or None; measures the record (into
        ``sizes``) only where the topic has a size limit."""
        if limits.compacted and record.key is None:
            return f"topic {record.topic} is compacted and the event has no key"
        if limits.max_message_bytes is None:
            return None
        size = single_record_batch_size(record.key, record.value, headers_of[record.id])
        sizes[record.id] = size
        if size <= limits.max_message_bytes:
            return None
        return (
            f"{size} bytes exceed max.message.bytes={limits.max_message_bytes} "
            f"of topic {record.topic} (MSG_SIZE_TOO_LARGE)"
        )

    def _load(self, topic: str, records: Sequence[OutboxRecord]) -> TopicLimits:
        try:
            metadata = self._producer.list_topics(topic=topic, timeout=self._timeout)
        except KafkaException as exc:
            raise translate(exc, f"reading metadata of {topic}", self._partition) from None
        found = metadata.topics.get(topic)
        error = None if found is None else found.error
        if found is None or (error is not None and error.code() in TOPIC_MISSING):
            waiting = sum(1 for r in records if r.topic == topic)
            raise TopicMissingError(
                f"relay partition {self._partition}: topic {topic!r} does not exist and the "
                f"broker does not create it; {waiting}+ row(s) wait in the outbox and are "
                "published once the topic exists"
            )
        if error is not None:
            raise RetriableError(f"relay partition {self._partition}: topic {topic!r}: {error}")
        limits = self._describe(topic)
        self._limits[topic] = limits
        return limits

    def _describe(self, topic: str) -> TopicLimits:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        admin = self._admin_client()
        try:
            entries = admin.describe_configs([resource])[resource].result(self._timeout)
        except KafkaException as exc:
            # Without DescribeConfigs permission the broker's own check still applies.
            log.warning("cannot read the configuration of topic %s: %s", topic, exc)
            return TopicLimits(None, compacted=False)
        limit = entries.get("max.message.bytes")
        policy = entries.get("cleanup.policy")
        return TopicLimits(
            max_message_bytes=int(limit.value) if limit is not None and limit.value else None,
            compacted=policy is not None and "compact" in str(policy.value),
        )

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = self._new_admin()
        return self._admin
