"""What the target cluster itself says of a replicated partition: its last committed copy
(the floor a position must match, relay.replication.position_check), its last stable
offset, and the topic ids of both sides (:class:`relay.replication.ports.TopicIds`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from relay.errors import RetriableError
from relay.kafka.admin import admin_client, describe_topics
from relay.kafka.errors import translate
from relay.replication.topic_ids import SharedTopicIds
from relay.replication.types import (
    SOURCE_CLUSTER_HEADER,
    SOURCE_OFFSET_HEADER,
    SOURCE_TOPIC_HEADER,
    LastCopy,
    Route,
)
from relay.runtime.clock import Clock
from relay.settings.connections import KafkaSettings
from relay.settings.replicate import ReplicateSettings

_FIRST_STEP = 64  # records read back from the end at first; each further step x4


def _copies_consumer(settings: ReplicateSettings, side: KafkaSettings | None = None) -> Consumer:
    return Consumer(
        {
            **(side or settings.target).client_config(),
            "group.id": f"{settings.group}.copies",  # never joins, never commits
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )


def stable_end(settings: ReplicateSettings, tp: TopicPartition) -> int:
    """The target partition's last stable offset."""
    consumer = _copies_consumer(settings)
    try:
        return int(_watermarks(consumer, tp, settings.target.request_timeout_s)[1])
    finally:
        consumer.close()


def _watermarks(consumer: Consumer, tp: TopicPartition, timeout: float) -> tuple[int, int]:
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
    except KafkaException as exc:
        raise translate(exc, f"reading the offsets of {tp.topic}[{tp.partition}]") from None
    return int(low), int(high)


def last_copy(settings: ReplicateSettings, tp: TopicPartition, since: int) -> LastCopy | None:
    """The last committed record of ``tp`` at offset ``since`` or later that carries a
    ``relay-source-offset`` header: read back from the last stable offset, a few records
    first, then four times as many each step."""
    timeout = settings.target.request_timeout_s
    consumer = _copies_consumer(settings)
    try:
        low, end = _watermarks(consumer, tp, timeout)
        first, step = max(low, since), _FIRST_STEP
        while end > first:
            begin = max(first, end - step)
            found = _last_in(consumer, tp, begin, end, timeout)
            if found is not None:
                return found
            end, step = begin, step * 4
        return None
    finally:
        consumer.close()


def copied_from_source(
    settings: ReplicateSettings, route: Route, copy: LastCopy, *, compacted: bool = False
) -> bool | None:
    """Whether ``copy`` is a copy of the record the source partition holds at its source
    offset now (same key, value and timestamp): False when the source holds another record
    there, or none (a transaction marker, an aborted record, the end): the source topic was
    created again since it was copied; None when the source's record at that offset may be
    gone: below its first offset (retention), or not there in a ``compacted`` topic."""
    timeout = settings.target.request_timeout_s
    source_tp = TopicPartition(route.topic, route.partition)
    target = _copies_consumer(settings)
    source = _copies_consumer(settings, settings.source)
    try:
        low, end = _watermarks(source, source_tp, timeout)
        if copy.source_offset >= end:
            return False
        if copy.source_offset < low:
            return None
        original = _record_at(source, source_tp, copy.source_offset, timeout)
        copied = _record_at(
            target, TopicPartition(route.target_topic, route.partition), copy.target_offset, timeout
        )
    finally:
        source.close()
        target.close()
    if copied is None:
        return None
    if original is None or original.offset() != copy.source_offset:
        return None if compacted else False
    return (original.key(), original.value(), original.timestamp()[1]) == (
        copied.key(),
        copied.value(),
        copied.timestamp()[1],
    )


def _record_at(
    consumer: Consumer, tp: TopicPartition, offset: int, timeout: float
) -> Message | None:
    """The first committed record of ``tp`` at ``offset`` or later (None: none before
    the end)."""
    consumer.assign([TopicPartition(tp.topic, tp.partition, offset)])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            message = consumer.poll(0.5)
        except KafkaException as exc:
            raise translate(exc, f"reading {tp.topic}[{tp.partition}]") from None
        if message is None:
            continue
        err = message.error()
        if err is None:
            return message
        if err.code() == LibKafkaError._PARTITION_EOF:
            return None
        raise RetriableError(f"reading {tp.topic}[{tp.partition}] failed: {err.str()}")
    raise RetriableError(
        f"reading {tp.topic}[{tp.partition}] at offset {offset} took over {timeout} s"
    )


def _last_in(
    consumer: Consumer, tp: TopicPartition, begin: int, end: int, timeout: float
) -> LastCopy | None:
    """The last copy in offsets ``[begin, end)``."""
    consumer.assign([TopicPartition(tp.topic, tp.partition, begin)])
    found: LastCopy | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            messages = consumer.consume(500, 0.5)
        except KafkaException as exc:
            raise translate(exc, f"reading {tp.topic}[{tp.partition}]") from None
        for message in messages:
            err = message.error()
            if err is not None:
                if err.code() == LibKafkaError._PARTITION_EOF:
                    return found
                raise RetriableError(f"reading {tp.topic}[{tp.partition}] failed: {err.str()}")
            offset = message.offset() or 0
            if offset >= end:
                return found
            headers = {str(pair[0]): _text(pair[1]) for pair in message.headers() or []}
            source = headers.get(SOURCE_OFFSET_HEADER, "")
            if source.isdigit():
                found = LastCopy(
                    offset,
                    headers.get(SOURCE_CLUSTER_HEADER, ""),
                    headers.get(SOURCE_TOPIC_HEADER, ""),
                    int(source),
                )
    raise RetriableError(
        f"reading {tp.topic}[{tp.partition}] from offset {begin} to {end} took over {timeout} s"
    )


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


class KafkaTopicIds(SharedTopicIds):
    """Implements :class:`relay.replication.ports.TopicIds` with one AdminClient per
    cluster, shared by the partitions of a run: one DescribeTopics request per cluster
    answers every partition whose records were read before it began
    (:mod:`relay.replication.topic_ids`)."""

    def __init__(self, settings: ReplicateSettings, clock: Clock | None = None) -> None:
        super().__init__(_describer(settings.source), _describer(settings.target), clock)


def _describer(side: KafkaSettings) -> Callable[[Sequence[str]], dict[str, str | None]]:
    admin, timeout = admin_client(side), side.request_timeout_s

    def describe(topics: Sequence[str]) -> dict[str, str | None]:
        found = describe_topics(admin, topics, timeout)
        return {topic: None if each is None else each.topic_id for topic, each in found.items()}

    return describe
