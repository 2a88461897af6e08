"""Checks a batch against its destination topics before anything is produced.

A missing topic, or one this relay may not write (TOPIC_AUTHORIZATION_FAILED), is a
retriable condition naming its rows: they hold the relay partition for at most
``--missing-topic-wait``, then the relay moves them to the dead-letter table (it may be
created, or the permission granted, meanwhile). A record the topic can never accept (larger
than ``max.message.bytes`` on its own, or a null key on a compacted topic) is refused up
front by outbox id, so the relay can move exactly that row to the dead-letter table instead
of failing the batch for ever. (A topic name Kafka cannot have never reaches the outbox:
the database refuses it, ``outbox_topic_valid``.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._metadata import TopicMetadata
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
_VARINT_MAX = 10  # bytes of the longest varint of a 64-bit value
RECORD_BOUND_OVERHEAD = _BATCH_OVERHEAD + 3 + 4 * _VARINT_MAX
"""With :func:`headers_bound`, an upper bound of :func:`single_record_batch_size`::

    single_record_batch_size(key, value, headers)
        <= RECORD_BOUND_OVERHEAD + len(key or b"") + len(value or b"") + headers_bound(headers)

(the record's length varint, its three one-byte fields, and the varints of the key, the
value and the header count, each counted at its longest)."""
_HEADER_BOUND_OVERHEAD = 2 * _VARINT_MAX  # a header's two length varints, at their longest

_TOPIC = attrgetter("topic")
_KEY = attrgetter("key")
_VALUE = attrgetter("value")


@dataclass(frozen=True, slots=True)
class TopicLimits:
    max_message_bytes: int | None
    compacted: bool


@dataclass(frozen=True, slots=True)
class BatchCheck:
    """What :meth:`TopicGuard.check` found in a batch."""

    refused: dict[int, str]
    """Outbox ids the topics can never accept, with the reason."""
    small_limits: dict[str, int]
    """max.message.bytes of the batch's topics whose limit is below ``measure_below``."""
    sizes: dict[int, int]
    """:func:`single_record_batch_size` of each record of a topic in ``small_limits``."""


def _varint_size(value: int) -> int:
    zigzag = (value << 1) ^ (value >> 63)
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


HeaderList = Sequence[tuple[str, str | bytes | None]]


def _byte_length(data: str | bytes | None) -> int:
    if data is None:
        return 0
    return len(data.encode()) if isinstance(data, str) else len(data)


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


def headers_bound(headers: HeaderList) -> int:
    """What ``headers`` add at most to a record's :func:`single_record_batch_size`
    (see :data:`RECORD_BOUND_OVERHEAD`)."""
    return sum(
        _HEADER_BOUND_OVERHEAD + _byte_length(name) + _byte_length(data) for name, data in headers
    )


def _longest(items: Iterable[bytes | None]) -> int:
    return max(map(len, filter(None, items)), default=0)


@dataclass(slots=True)
class _Measure:
    """How one :meth:`TopicGuard.check` measures its batch."""

    headers_of: Callable[[OutboxRecord], HeaderList]
    overhead: int
    """RECORD_BOUND_OVERHEAD plus the headers bound of every record of the batch."""
    measure_below: int
    sizes: dict[int, int] = field(default_factory=dict)

    def exact(self, record: OutboxRecord) -> int:
        return single_record_batch_size(record.key, record.value, self.headers_of(record))

    def watched(self, records: Sequence[OutboxRecord], limits: dict[str, TopicLimits]) -> set[str]:
        """The topics whose records must be looked at one by one: the batch as a whole may
        hold a record they refuse (a null key for a compacted topic, a size bound above
        the limit), or their limit is below ``measure_below``."""
        watched: set[str] = set()
        keys: list[bytes | None] | None = None
        largest: int | None = None  # the size bound of the batch's largest record
        for topic, found in limits.items():
            if found.compacted:
                keys = list(map(_KEY, records)) if keys is None else keys
                if None in keys:
                    watched.add(topic)
                    continue
            limit = found.max_message_bytes
            if limit is None:
                continue
            if largest is None:
                keys = list(map(_KEY, records)) if keys is None else keys
                largest = self.overhead + _longest(keys) + _longest(map(_VALUE, records))
            if limit < self.measure_below or largest > limit:
                watched.add(topic)
        return watched

    def refusal(self, record: OutboxRecord, limits: TopicLimits) -> str | None:
        """Why the topic can never accept ``record``, or None. Measures the record exactly
        where its size bound exceeds the limit, or the limit is below ``measure_below``
        (then into ``sizes``)."""
        if limits.compacted and record.key is None:
            return f"topic {record.topic} is compacted and the event has no key"
        limit = limits.max_message_bytes
        if limit is None:
            return None
        small = limit < self.measure_below
        if not small:
            key, value = record.key, record.value
            bound = self.overhead + (0 if key is None else len(key))
            if bound + (0 if value is None else len(value)) <= limit:
                return None
        size = self.exact(record)
        if small:
            self.sizes[record.id] = size
        if size <= limit:
            return None
        return (
            f"{size} bytes exceed max.message.bytes={limit} "
            f"of topic {record.topic} (MSG_SIZE_TOO_LARGE)"
        )


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

    def forget(self, topic: str) -> None:
        self._limits.pop(topic, None)

    def forget_all(self) -> None:
        """Read every topic's limits again before the next batch (the broker refused a
        record batch: a limit was lowered since it was read)."""
        self._limits.clear()

    def check(
        self,
        records: Sequence[OutboxRecord],
        headers_of: Callable[[OutboxRecord], HeaderList],
        headers_max: int,
        measure_below: int,
    ) -> BatchCheck:
        """The records the topics can never accept, and the limits of the topics whose
        max.message.bytes is below ``measure_below`` with the exact size of their records.
        Raises TopicMissingError when a topic does not exist.

        ``headers_of`` gives a record's headers; ``headers_max`` is at least
        :func:`headers_bound` of the headers of every record. Records are measured
        exactly only near their topic's limit: a batch whose largest record is bound to
        fit every limit is checked as a whole."""
        fresh: set[str] = set()  # topics whose limits were read during this check
        limits: dict[str, TopicLimits] = {}
        for topic in dict.fromkeys(map(_TOPIC, records)):  # in order of first appearance
            found = self._limits.get(topic)
            if found is None:
                found = self._load(topic, records)
                fresh.add(topic)
            limits[topic] = found
        measure = _Measure(headers_of, RECORD_BOUND_OVERHEAD + headers_max, measure_below)
        watched = measure.watched(records, limits)
        refused: dict[int, str] = {}
        for record in records if watched else ():
            topic = record.topic
            if topic not in watched:
                continue
            reason = measure.refusal(record, limits[topic])
            if reason is not None and topic not in fresh:
                # Refuse for good only on limits read now: the topic may accept more since.
                limits[topic] = self._load(topic, records)
                fresh.add(topic)
                reason = measure.refusal(record, limits[topic])
            if reason is not None:
                refused[record.id] = reason
        small_limits = {
            topic: limit
            for topic, found in limits.items()
            if (limit := found.max_message_bytes) is not None and limit < measure_below
        }
        for record in records if small_limits else ():
            if record.topic in small_limits and record.id not in measure.sizes:
                measure.sizes[record.id] = measure.exact(record)  # its limits were read again
        return BatchCheck(refused, small_limits, measure.sizes)

    def _load(self, topic: str, records: Sequence[OutboxRecord]) -> TopicLimits:
        try:
            found = read_topic(self._producer, topic, self._timeout, self._partition)
        except TopicMissingError as exc:  # TOPIC_AUTHORIZATION_FAILED
            raise self._unavailable(topic, records, exc.reason) from None
        if found is None:
            raise self._unavailable(
                topic, records, "does not exist and the broker does not create it"
            )
        limits = self._describe(topic)
        self._limits[topic] = limits
        return limits

    def _unavailable(
        self, topic: str, records: Sequence[OutboxRecord], why: str
    ) -> TopicMissingError:
        ids = tuple(r.id for r in records if r.topic == topic)
        return TopicMissingError(
            f"relay partition {self._partition}: topic {topic!r} {why}; its {len(ids)} row(s) "
            f"of the batch (outbox id {ids[0] if ids else '-'} first) wait in the outbox "
            "for --missing-topic-wait, then go to outbox_dead_letters",
            topic,
            ids,
            f"topic {topic!r} {why}",
        )

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


def read_topic(
    producer: Producer, topic: str, timeout: float, partition: int
) -> TopicMetadata | None:
    """``topic``'s metadata as relay partition ``partition``'s producer reads it; None when
    the topic does not exist."""
    try:
        metadata = producer.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise translate(exc, f"reading metadata of {topic}", partition) from None
    found: TopicMetadata | None = metadata.topics.get(topic)
    error = None if found is None else found.error
    if found is None or (error is not None and error.code() in TOPIC_MISSING):
        return None
    if error is not None and error.code() == LibKafkaError.TOPIC_AUTHORIZATION_FAILED:
        why = "may not be written by this relay (TOPIC_AUTHORIZATION_FAILED)"
        raise TopicMissingError(
            f"relay partition {partition}: topic {topic!r} {why}", topic, reason=why
        )
    if error is not None:
        raise RetriableError(f"relay partition {partition}: topic {topic!r}: {error}")
    return found
