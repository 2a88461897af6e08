"""Reading a consumer group's committed offsets, and the records of a partition, on one
cluster without joining the group (:mod:`relay.kafka.offset_translation`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka.admin import AdminClient

from relay.errors import ConfigurationError, KafkaError
from relay.kafka.errors import kafka_reason, translate
from relay.runtime.clock import Deadline
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.connections import KafkaSettings

log = logging.getLogger(__name__)
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)


class ClusterReader:
    """A ``read_committed`` consumer of one cluster whose ``group.id`` is the group whose
    committed offsets it reads (stable ones: pending transactional offsets are waited
    for); it never joins the group and never commits."""

    def __init__(self, kafka: KafkaSettings, group: str, cluster: str) -> None:
        self.cluster = cluster
        self._timeout = kafka.request_timeout_s
        try:
            self._consumer = Consumer(
                {
                    **kafka.client_config(),
                    "group.id": group,
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,  # a probe finds "nothing" at the end
                    "auto.offset.reset": "earliest",  # below the first offset: from there
                    "fetch.wait.max.ms": 10,
                },
                logger=_librdkafka_log,
            )
        except KafkaException as exc:
            raise ConfigurationError(
                f"{cluster} Kafka configuration rejected: {kafka_reason(exc)}"
            ) from None

    def committed(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The group's committed offset of each partition that has one."""
        return {at: offset for at, (offset, _) in self.committed_entries(partitions).items()}

    def committed_entries(
        self, partitions: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, str]]:
        """The group's committed offset of each partition that has one, with its
        metadata."""
        if not partitions:
            return {}
        wanted = [TopicPartition(topic, p) for topic, p in partitions]
        try:
            found = self._consumer.committed(wanted, timeout=self._timeout)
        except KafkaException as exc:
            raise translate(exc, f"reading committed offsets on the {self.cluster}") from None
        offsets = {}
        for tp in found:
            if tp.error is not None:
                raise KafkaError(
                    f"reading the committed offset of {tp.topic}[{tp.partition}] on the "
                    f"{self.cluster} failed: {tp.error.str()}"
                )
            if tp.offset >= 0:
                offsets[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
        return offsets

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """The partition's first offset and its last stable offset."""
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self._timeout, cached=False
            )
        except KafkaException as exc:
            raise translate(exc, f"reading the offsets of {topic}[{partition}]") from None
        return int(low), int(high)

    def first(self, topic: str, partition: int, offset: int, end: int) -> Message | None:
        """The first committed record at ``offset`` or later and below ``end`` (one fetch
        unless aborted records or transaction markers come first)."""
        if offset >= end:
            return None
        deadline = Deadline(self._timeout)
        try:
            self._consumer.assign([TopicPartition(topic, partition, offset)])
            while not deadline.expired():
                message = self._consumer.poll(max(0.05, deadline.remaining()))
                if message is None or message.partition() != partition:
                    continue
                err = message.error()
                if err is not None:
                    if err.code() == LibKafkaError._PARTITION_EOF:
                        return None
                    raise KafkaError(f"reading {topic}[{partition}] failed: {err.str()}")
                found = message.offset() or 0
                if found < offset:  # reset to the first offset: the log ends below offset
                    raise KafkaError(
                        f"{topic}[{partition}] ends below offset {offset} on the "
                        f"{self.cluster}: it was truncated or deleted while being read"
                    )
                return message if found < end else None
        except KafkaException as exc:
            raise translate(exc, f"reading {topic}[{partition}] at offset {offset}") from None
        raise KafkaError(
            f"reading {topic}[{partition}] at offset {offset} on the {self.cluster}: no "
            f"answer within {self._timeout:g} s"
        )

    def close(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("closing a consumer of the %s: %s", self.cluster, exc)


def header(message: Message, name: str) -> str:
    """The value of ``message``'s header ``name``, as text ("None" when it has none)."""
    found = message.headers() or ()
    pairs = found.items() if isinstance(found, dict) else found
    value = next((v for k, v in pairs if k == name), None)
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def partitions(
    admin: AdminClient, cluster: str, wanted: Callable[[str], bool], timeout: float
) -> dict[str, int]:
    """The partition count of each topic of ``cluster`` that ``wanted`` selects."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise translate(exc, f"listing the {cluster} cluster's topics") from None
    return {
        topic: len(meta.partitions)
        for topic, meta in metadata.topics.items()
        if meta.error is None and wanted(topic)
    }
