"""A ``read_committed`` reader: every record of a topic that a consumer with
``isolation.level=read_committed`` sees, from the start to each partition's last stable
offset. Tests, benchmarks and checkers compare it with what was committed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition


class ReadError(Exception):
    """The topic could not be read to its end."""


@dataclass(frozen=True, slots=True)
class ReadRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    header_pairs: tuple[tuple[str, bytes | None], ...] = ()  # as written: order, repeats, nulls
    timestamp: tuple[int, int] = (0, 0)  # (confluent_kafka.TIMESTAMP_*, milliseconds)

    @property
    def headers(self) -> Mapping[str, bytes]:
        """The headers by name (the last of a repeated name; a null value as b"")."""
        return {name: value or b"" for name, value in self.header_pairs}

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
    records = list(committed_records(bootstrap_servers, topic, timeout, config))
    return sorted(records, key=lambda r: (r.partition, r.offset))


def count_committed(bootstrap_servers: str, topic: str, timeout: float = 120.0) -> int:
    """How many committed records ``topic`` holds (all partitions, from the start)."""
    return sum(1 for _ in committed_records(bootstrap_servers, topic, timeout))


def committed_records(
    bootstrap_servers: str,
    topic: str,
    timeout: float = 60.0,
    config: Mapping[str, str] | None = None,
) -> Iterator[ReadRecord]:
    """The committed records of ``topic`` as a read_committed consumer delivers them (each
    partition in offset order), up to each partition's last stable offset when it is read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # A broker may call offset 0 of a partition just created out of range for a
            # moment: start over at the beginning, never at the end.
            "auto.offset.reset": "earliest",
            **(config or {}),
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending = set(partitions)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise ReadError(f"reading {topic}: partitions {sorted(pending)} never reached EOF")
            for msg in consumer.consume(10_000, 0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(int(msg.partition() or 0))
                        continue
                    raise ReadError(f"reading {topic}: {error}")
                yield ReadRecord(
                    int(msg.partition() or 0),
                    int(msg.offset() or 0),
                    _as_bytes(msg.key()),
                    _as_bytes(msg.value()),
                    _headers(msg.headers()),
                    msg.timestamp(),
                )
    finally:
        consumer.close()


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _headers(
    headers: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None,
) -> tuple[tuple[str, bytes | None], ...]:
    pairs = headers.items() if isinstance(headers, dict) else headers or []
    return tuple((name, _as_bytes(value)) for name, value in pairs)
