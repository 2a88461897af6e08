"""The mirror's Kafka edge: a read_committed consumer positioned only from the database.

In a consumer group (``relay mirror``) partitions come and go through cooperative-sticky
rebalances; ``on_assign`` asks the core for the stored offsets and assigns the new
partitions there. ``--once`` and the Spark tasks assign partitions themselves. Offsets
are never committed to Kafka: ``mirror_offsets`` is the only truth.

``enable.partition.eof`` reports the end of each partition: for a read_committed
consumer librdkafka reports it at the last stable offset, past aborted records and
transaction markers, which is how the stored offset gets past them too.
Without a group (``--once``, Spark tasks) the stream takes what the consumer has fetched
in batches of up to ``FETCHED_BATCH`` messages (one call, not one per message) and
serves them one by one; a seek drops those of its partition, so the next record is the
one at the offset sought. With a group it takes one message at a time: a rebalance may
run inside any call, and a message taken before it must not outlive the assignment.

``auto.offset.reset=error`` turns a stored offset that no longer exists (deleted by
retention before it was mirrored) into an error instead of a silent jump. A partition
with no stored offset starts at the log's start; when records were deleted before it
(retention, delete-records), a warning names them: they will never be in the tables.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka import KafkaError as LibKafkaError

from relay.errors import ConfigurationError, KafkaError, OffsetOutOfRangeError
from relay.kafka.errors import kafka_reason
from relay.mirroring.ports import AssignmentListener
from relay.mirroring.types import KafkaRecord, PartitionEnd, RecordHeaders, TopicPartitionKey
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.connections import KafkaSettings

log = logging.getLogger(__name__)
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)

_FATAL_CODES = frozenset(
    {
        LibKafkaError.UNKNOWN_TOPIC_OR_PART,
        LibKafkaError.TOPIC_AUTHORIZATION_FAILED,
        LibKafkaError.GROUP_AUTHORIZATION_FAILED,
    }
)
FETCHED_BATCH = 500
"""The most messages one call takes from the consumer's queue, without a group."""


def _headers(raw: object) -> RecordHeaders:
    if not raw:
        return ()
    if type(raw) is list:  # as the consumer gives them: (str, bytes | None) pairs
        return tuple(raw)
    pairs = raw.items() if isinstance(raw, dict) else raw
    result: list[tuple[str, bytes | None]] = []
    for name, value in pairs:  # type: ignore[attr-defined]
        result.append((str(name), value.encode() if isinstance(value, str) else value))
    return tuple(result)


def _start(offset: int | None) -> int:
    return OFFSET_BEGINNING if offset is None else offset


class KafkaRecordStream:
    """Implements :class:`relay.mirroring.ports.RecordStream` with librdkafka."""

    def __init__(self, kafka: KafkaSettings, group: str) -> None:
        self._timeout = kafka.request_timeout_s
        self._group = group
        self._batched = False  # assigned without a group: take fetched messages in batches
        self._fetched: deque[Message] = deque()
        self._listener: AssignmentListener | None = None
        config = {
            "fetch.wait.max.ms": 100,
            **kafka.client_config(),
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "partition.assignment.strategy": "cooperative-sticky",
        }
        try:
            self._consumer = Consumer(config, logger=_librdkafka_log)
        except KafkaException as exc:
            raise ConfigurationError(f"Kafka configuration rejected: {kafka_reason(exc)}") from None

    def subscribe(self, topics: Sequence[str], listener: AssignmentListener) -> None:
        """Join the consumer group; partitions arrive through rebalances."""
        self._listener = listener
        self._consumer.subscribe(
            list(topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def assign(self, partitions: Sequence[TopicPartitionKey], listener: AssignmentListener) -> None:
        """Take these partitions without a group (``--once``, Spark tasks)."""
        self._listener = listener
        starts = listener.assigned(list(partitions))
        self._report_deleted([tp for tp in partitions if starts[tp] is None])
        self._batched = True
        self._consumer.assign([TopicPartition(t, p, _start(starts[(t, p)])) for t, p in partitions])

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        starts = self._listener.assigned(keys) if keys and self._listener is not None else {}
        self._report_deleted([tp for tp in keys if starts.get(tp) is None])
        consumer.incremental_assign(
            [TopicPartition(t, p, _start(starts.get((t, p)))) for t, p in keys]
        )

    def _report_deleted(self, unstored: Sequence[TopicPartitionKey]) -> None:
        """Warn about the records deleted from the start of partitions that have no
        stored offset (so start at the log's start)."""
        for topic, partition in unstored:
            try:
                low, _high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self._timeout, cached=False
                )
            except KafkaException as exc:  # only a warning is at stake: reading goes on
                log.debug("%s[%d]: reading the log start failed: %s", topic, partition, exc)
                continue
            if low > 0:
                log.warning(
                    "%s[%d]: offsets 0..%d were deleted from the log before group %s stored "
                    "an offset for it; mirroring from offset %d",
                    topic,
                    partition,
                    low - 1,
                    self._group,
                    low,
                )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions and self._listener is not None:
            self._listener.revoked([(tp.topic, tp.partition) for tp in partitions])
        consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning(
            "lost partitions %s (the group moved on without this instance)",
            ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions),
        )
        self._on_revoke(consumer, partitions)

    def poll(self, timeout: float) -> KafkaRecord | PartitionEnd | None:
        fetched = self._fetched
        msg = fetched.popleft() if fetched else self._next_message(timeout)
        if msg is None:
            return None
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        err = msg.error()
        if err is None and topic is not None and partition is not None and offset is not None:
            # Once per record: the headers as the consumer gives them (a list of pairs), and
            # the Kafka timestamp (CreateTime or LogAppendTime) in ms since the epoch.
            headers: object = msg.headers()
            kind, ms = msg.timestamp()
            return KafkaRecord(
                topic,
                partition,
                offset,
                msg.key(),
                msg.value(),
                tuple(headers) if type(headers) is list else _headers(headers),
                None if kind == TIMESTAMP_NOT_AVAILABLE or ms < 0 else ms,
            )
        if err is None:
            return None
        where = f"{topic}[{partition}]"
        if err.code() == LibKafkaError._PARTITION_EOF and topic is not None:
            return PartitionEnd(topic, partition or 0, offset or 0)
        if err.code() == LibKafkaError._AUTO_OFFSET_RESET and topic is not None:
            raise OffsetOutOfRangeError(
                f"{where}: the stored offset is not in the log any more ({err.str()}); records "
                "were deleted before they were mirrored, or the topic was recreated. Set "
                "mirror_offsets.next_offset for this partition to where it should continue",
                topic,
                partition or 0,
                code=err.name(),
            )
        if err.fatal() or err.code() in _FATAL_CODES:
            raise KafkaError(f"consuming {where} failed: {err.str()}", code=err.name())
        log.warning("consumer: %s (%s)", err.str(), err.name())
        return None

    def _next_message(self, timeout: float) -> Message | None:
        if self._fetched:
            return self._fetched.popleft()
        if self._batched:  # what is fetched already, in one call; else wait for one
            self._fetched.extend(self._consumer.consume(FETCHED_BATCH, 0))
            if self._fetched:
                return self._fetched.popleft()
        return self._consumer.poll(timeout)

    def seek(self, topic: str, partition: int, offset: int | None) -> None:
        if self._fetched:  # fetched before the seek: not what comes after it
            self._fetched = deque(
                m for m in self._fetched if m.topic() != topic or m.partition() != partition
            )
        try:
            self._consumer.seek(TopicPartition(topic, partition, _start(offset)))
        except KafkaException as exc:
            raise KafkaError(
                f"{topic}[{partition}]: seeking to {offset} failed: {kafka_reason(exc)}"
            ) from None

    def last_stable_offsets(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, int]:
        """Queried from the brokers: for a read_committed consumer the high offset of
        ListOffsets is the last stable offset (the cached value would be the high
        watermark)."""
        result: dict[TopicPartitionKey, int] = {}
        for topic, partition in partitions:
            try:
                _low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self._timeout, cached=False
                )
            except KafkaException as exc:
                raise KafkaError(
                    f"{topic}[{partition}]: reading the last stable offset failed: "
                    f"{kafka_reason(exc)}"
                ) from None
            result[(topic, partition)] = int(high)
        return result

    def record_times(
        self, starts: Mapping[TopicPartitionKey, int | None]
    ) -> dict[TopicPartitionKey, int | None]:
        """The Kafka timestamp (ms) of the first committed record at or after each start
        offset (None: the beginning): the oldest record not yet applied. None for a
        partition with no such record before its end (only transaction markers or aborted
        records left); a partition whose start is not in the log any more is left out.
        Only for a stream that consumes nothing else: it assigns these partitions."""
        found: dict[TopicPartitionKey, int | None] = {}
        gone: set[TopicPartitionKey] = set()
        deadline = time.monotonic() + self._timeout
        assigned = [TopicPartition(t, p, _start(o)) for (t, p), o in starts.items()]
        self._fetched.clear()  # of another assignment
        self._consumer.assign(assigned)
        try:
            while len(found) + len(gone) < len(starts):
                if (left := deadline - time.monotonic()) <= 0:
                    raise KafkaError(f"reading the records at {len(starts)} offsets timed out")
                try:
                    got = self.poll(min(left, 0.5))
                except OffsetOutOfRangeError as exc:
                    gone.add((exc.topic, exc.partition))
                    self._consumer.pause([TopicPartition(exc.topic, exc.partition)])
                    continue
                if got is None or (key := (got.topic, got.partition)) in found:
                    continue
                found[key] = (got.timestamp_ms or 0) if isinstance(got, KafkaRecord) else None
                self._consumer.pause([TopicPartition(*key)])
        finally:
            # librdkafka keeps a partition paused across assignments: resume before leaving.
            self._consumer.resume(assigned)
            self._consumer.unassign()
            self._fetched.clear()
        return found

    def close(self) -> None:
        """Leave the group (revoking what is assigned); never raises."""
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("closing the consumer: %s", exc)
