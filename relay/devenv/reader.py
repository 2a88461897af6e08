"""A ``read_committed`` reader: every record of a topic that a consumer with
``isolation.level=read_committed`` sees, from the start to each partition's last stable
offset. Tests, benchmarks and checkers compare it with what was committed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition


class ReadError(Exception):
    """The topic could not be read to its end."""


@dataclass(frozen=True, slots=True)
class ReadRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes] = field(default_factory=dict)
    timestamp: tuple[int, int] = (0, 0)  # (confluent_kafka.TIMESTAMP_*, milliseconds)

    @property
    def outbox_id(self) -> int:
        return int(self.headers["outbox-id"])

    @property
    def seq(self) -> int:
        return int(self.headers["outbox-seq"])

    @property
    def relay_partition(self) -> int:
        return int(self.headers["outbox-partition"])


def read_committed(
    bootstrap_servers: str,
    topic: str,
    timeout: float = 60.0,
    config: Mapping[str, str] | None = None,
) -> list[ReadRecord]:
    """Every committed record of ``topic`` in partition then offset order; raises
    :class:`ReadError` when a partition's end is not reached within ``timeout`` seconds."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            **(config or {}),
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending = set(partitions)
        records: list[ReadRecord] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise ReadError(f"reading {topic}: partitions {sorted(pending)} never reached EOF")
            for msg in consumer.consume(10_000, 0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise ReadError(f"reading {topic}: {error}")
                records.append(
                    ReadRecord(
                        int(msg.partition() or 0),
                        int(msg.offset() or 0),
                        _as_bytes(msg.key()),
                        _as_bytes(msg.value()),
                        _headers(msg.headers()),
                        msg.timestamp(),
                    )
                )
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _headers(
    headers: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None,
) -> dict[str, bytes]:
    pairs = headers.items() if isinstance(headers, dict) else headers or []
    return {name: _as_bytes(value) or b"" for name, value in pairs}
