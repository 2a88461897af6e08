"""Reading one source partition ``read_committed`` (:class:`relay.replication.ports.
SourceReader`).

The consumer is only assigned, never joins a group and never commits: the replicator's
positions live on the target cluster, so the source cluster is only read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from relay.errors import ConfigurationError, KafkaError, RetriableError
from relay.kafka.errors import TRANSIENT_CODES, kafka_reason, translate
from relay.replication.types import Headers, Route, SourceRecord
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.replicate import ReplicateSettings

log = logging.getLogger(__name__)
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)


def source_consumer(settings: ReplicateSettings) -> Consumer:
    """A read_committed consumer of the source cluster that is only ever assigned."""
    try:
        return Consumer(
            {
                **settings.source.client_config(),
                # librdkafka wants a group id; this one never joins and never commits.
                "group.id": f"{settings.group}.source",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                # An offset the broker calls out of range is the reader's to judge
                # (read()): a broker may say so for a moment about a partition just
                # created, and resetting to "earliest" then would copy records again.
                "auto.offset.reset": "error",
            },
            logger=_librdkafka_log,
        )
    except KafkaException as exc:
        raise ConfigurationError(
            f"source Kafka configuration rejected: {kafka_reason(exc)}"
        ) from None


def _headers(raw: object) -> Headers:
    """A consumed record's headers: librdkafka gives a list of (name, bytes) tuples."""
    return tuple(raw) if isinstance(raw, list) else ()


class KafkaSourceReader:
    """Implements :class:`relay.replication.ports.SourceReader` with librdkafka."""

    def __init__(self, settings: ReplicateSettings, route: Route) -> None:
        self._route = route
        self._timeout = settings.source.request_timeout_s
        self._consumer = source_consumer(settings)
        self._next = 0  # the offset after the last record read (or the one sought)

    def seek(self, next_offset: int) -> None:
        self._next = next_offset
        try:
            # assign() (not seek()) also drops whatever was fetched from the old position.
            self._consumer.assign(
                [TopicPartition(self._route.topic, self._route.partition, next_offset)]
            )
        except KafkaException as exc:
            raise translate(exc, f"{self._route}: reading from offset {next_offset}") from None

    def read(self, max_records: int, wait_s: float) -> Sequence[SourceRecord]:
        consume = self._consumer.consume
        try:
            # Whatever is fetched already; else wait for the first record only, then take
            # what came with it (consume(n, t) would wait for all n until t).
            messages = consume(max_records, 0)
            if not messages and wait_s > 0:
                messages = consume(1, wait_s)
                if messages and max_records > 1:
                    messages += consume(max_records - 1, 0)
        except KafkaException as exc:
            raise translate(exc, f"{self._route}: reading") from None
        records: list[SourceRecord] = []
        append, no_time = records.append, TIMESTAMP_NOT_AVAILABLE
        for message in messages:  # per record: keep this loop lean (docs/performance.md)
            err = message.error()
            if err is not None:
                if err.code() == LibKafkaError._AUTO_OFFSET_RESET:
                    self._out_of_range(err.str())
                    break  # what was read before it is good
                self._raise(err)
            kind, timestamp = message.timestamp()
            raw = message.headers()
            append(
                SourceRecord(
                    message.offset() or 0,  # a consumed record always has its offset
                    message.key(),
                    message.value(),
                    _headers(raw) if raw else (),
                    0 if kind == no_time else timestamp,
                )
            )
        if records:
            self._next = records[-1].offset + 1
        return records

    def _out_of_range(self, reason: str) -> None:
        """The broker called the next offset out of range: read on from the partition's
        first offset when retention deleted the records before they were copied (they are
        lost to the target, as to any consumer); otherwise read the same offset again."""
        tp = TopicPartition(self._route.topic, self._route.partition)
        try:
            low, high = self._consumer.get_watermark_offsets(
                tp, timeout=self._timeout, cached=False
            )
        except KafkaException as exc:
            raise translate(exc, f"{self._route}: reading the first offset") from None
        if self._next < low:
            log.warning(
                "%s: offsets %d..%d were deleted on the source (retention) before they were "
                "copied; copying on from offset %d",
                self._route,
                self._next,
                low - 1,
                low,
            )
            self.seek(low)
            return
        self.seek(self._next)
        if self._next > high:
            raise KafkaError(
                f"{self._route}: the source partition ends at offset {high}, below the next "
                f"offset to copy ({self._next}): its log was truncated or the topic recreated"
            )
        raise RetriableError(f"{self._route}: offset {self._next} reported out of range: {reason}")

    def _raise(self, err: object) -> None:
        code = getattr(err, "code", lambda: None)()
        text = getattr(err, "str", lambda: str(err))()
        if code in TRANSIENT_CODES or getattr(err, "retriable", lambda: False)():
            raise RetriableError(f"{self._route}: reading the source failed: {text}")
        raise KafkaError(f"{self._route}: reading the source failed: {text}")

    def position(self) -> int:
        tp = TopicPartition(self._route.topic, self._route.partition)
        try:
            found = self._consumer.position([tp])[0].offset
        except KafkaException as exc:
            raise translate(exc, f"{self._route}: reading the position") from None
        return found if found >= 0 else self._next

    def end_offset(self) -> int:
        """For a read_committed consumer, the high offset the brokers report is the last
        stable offset."""
        tp = TopicPartition(self._route.topic, self._route.partition)
        try:
            _low, high = self._consumer.get_watermark_offsets(
                tp, timeout=self._timeout, cached=False
            )
        except KafkaException as exc:
            raise translate(exc, f"{self._route}: reading the last stable offset") from None
        return int(high)

    def close(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("%s: closing the source consumer: %s", self._route, exc)


def last_stable_offsets(
    settings: ReplicateSettings, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Each source partition's last stable offset (for the lag), with one consumer."""
    consumer = source_consumer(settings)
    timeout = settings.source.request_timeout_s
    found: dict[tuple[str, int], int] = {}
    try:
        for topic, partition in partitions:
            tp = TopicPartition(topic, partition)
            try:
                _low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
            except KafkaException as exc:
                raise translate(
                    exc, f"{topic}[{partition}]: reading the last stable offset"
                ) from None
            found[(topic, partition)] = int(high)
    finally:
        consumer.close()
    return found
