"""One relay partition's transactional producer, with its position in Kafka.

The position of relay partition ``p`` is the committed offset of partition ``p`` of the
positions topic, for the positions consumer group. It is written only inside the
producer's transaction (``send_offsets_to_transaction``) and read only after
``init_transactions()`` by a ``read_committed`` consumer, which makes the broker wait
for any pending transactional offset commit instead of returning a stale one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from operator import attrgetter

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, TopicPartition

from relay.errors import (
    RetriableError,
    TopicMissingError,
    UndeliverableEventError,
)
from relay.kafka.admin import admin_client
from relay.kafka.errors import (
    RECORD_REFUSED,
    lib_error,
    translate,
)
from relay.kafka.positions import committed_position, positions_consumer
from relay.kafka.topics import TOPIC_MISSING, TopicGuard, headers_bound, read_topic
from relay.kafka.transactions import PRODUCER_DEFAULTS, TransactionalProducer
from relay.publishing.types import CommittedPosition, OutboxRecord, PositionOwner
from relay.runtime.heartbeat import HEARTBEAT_HEADER, HEARTBEAT_HEADER_VALUE, Heartbeat
from relay.settings.relay import RelaySettings

_LIBRDKAFKA_BATCH_SIZE = 1_000_000  # librdkafka's default batch.size


def record_headers(record: OutboxRecord) -> list[tuple[str, str | bytes | None]]:
    """The headers of ``record``'s Kafka record: the relay's own, then the event's."""
    headers: list[tuple[str, str | bytes | None]] = [
        ("outbox-id", b"%d" % record.id),
        ("outbox-seq", b"%d" % record.seq),
        ("outbox-partition", b"%d" % record.partition),
    ]
    if record.event_type is not None:
        headers.append(("event-type", record.event_type.encode()))
    if record.headers:
        headers += record.headers
    return headers


# headers_bound() of the relay's own headers with empty values.
_OWN_HEADERS_BOUND = headers_bound(
    [(name, None) for name in ("outbox-id", "outbox-seq", "outbox-partition", "event-type")]
)
_ID = attrgetter("id")
_SEQ = attrgetter("seq")
_PARTITION = attrgetter("partition")
_EVENT_TYPE = attrgetter("event_type")
_HEADERS = attrgetter("headers")


def _digits(numbers: Iterable[int]) -> int:
    """At least the length of ``b"%d" % n`` of every n of ``numbers``."""
    return len(b"%d" % max(map(abs, numbers), default=0)) + 1  # + a minus sign


def batch_headers_bound(records: Sequence[OutboxRecord]) -> int:
    """At least ``headers_bound(record_headers(r))`` of every record r of ``records``,
    found without building their headers."""
    event_types = set(map(_EVENT_TYPE, records))
    event_types.discard(None)
    return (
        _OWN_HEADERS_BOUND
        + _digits(map(_ID, records))
        + _digits(map(_SEQ, records))
        + _digits(map(_PARTITION, records))
        + max((len(event_type.encode()) for event_type in event_types), default=0)
        + max(map(headers_bound, filter(None, map(_HEADERS, records))), default=0)
    )


class KafkaTransactionalPublisher(TransactionalProducer):
    """Implements :class:`relay.publishing.ports.TransactionalPublisher` with librdkafka."""

    def __init__(self, settings: RelaySettings, partition: int, owner: PositionOwner) -> None:
        self._settings = settings
        self._partition = partition
        self._stamp = owner.stamp()
        base = settings.kafka.client_config()
        self._batch_bytes = int(base.get("batch.size", _LIBRDKAFKA_BATCH_SIZE))
        super().__init__(
            self._producer_config,
            partial(positions_consumer, settings),
            where=f"relay partition {partition}",
            timeout=max(settings.kafka.request_timeout_s, 30.0),
        )
        self._position_tp = TopicPartition(settings.positions_topic, partition)
        self._topics = self._new_topic_guard()

    def _producer_config(self) -> dict[str, str | int | float | bool]:
        settings = self._settings
        return {
            **PRODUCER_DEFAULTS,
            **settings.kafka.client_config(),
            # Only a failed delivery calls on_delivery: a success needs nothing.
            "delivery.report.only.error": True,
            "transactional.id": settings.transactional_id(self._partition),
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "transaction.timeout.ms": settings.kafka.transaction_timeout_ms,
        }

    def _new_topic_guard(self) -> TopicGuard:
        # The AdminClient is created only when a topic's configuration is first read.
        return TopicGuard(
            self._producer,
            partial(admin_client, self._settings.kafka),
            self._partition,
            self._timeout,
        )

    def reset(self) -> None:
        super().reset()
        self._topics = self._new_topic_guard()

    def fence(self) -> CommittedPosition:
        return committed_position(self._read_committed(self._position_tp))

    def prepare(self) -> None:
        """Nothing to wait for: the partition's transactions are its own."""

    def withdraw(self) -> None:
        """Nothing was announced."""

    def send(self, records: Sequence[OutboxRecord]) -> None:
        check = self._topics.check(
            records, record_headers, batch_headers_bound(records), self._batch_bytes
        )
        if check.refused:
            raise self._refused_error(check.refused)
        # The broker applies max.message.bytes to a whole record batch. For a topic whose
        # limit is below the producer's batch.size, flush before a batch could outgrow it.
        small_limits = check.small_limits
        pending: dict[str, int] = {}
        produce, on_delivery = self._producer.produce, self._on_delivery
        for record in records:
            if small_limits and (limit := small_limits.get(record.topic)) is not None:
                size = check.sizes[record.id]  # measured by check(): the limit is small
                if pending.get(record.topic, 0) + size > limit:
                    self._producer.flush(self._timeout)
                    pending.clear()
                pending[record.topic] = pending.get(record.topic, 0) + size
            headers = record_headers(record)
            while True:
                try:
                    produce(
                        record.topic,
                        record.value,
                        record.key,
                        headers=headers,
                        timestamp=record.timestamp_ms,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.05)
                except KafkaException as exc:
                    raise self._produce_error(exc, record) from None

    def send_heartbeats(self, topics: Sequence[str], heartbeat: Heartbeat) -> None:
        value, key = heartbeat.encode(), heartbeat.key
        headers: list[tuple[str, str | bytes | None]] = [(HEARTBEAT_HEADER, HEARTBEAT_HEADER_VALUE)]
        for topic in topics:
            for partition in range(self._partition_count(topic)):
                while True:
                    try:
                        self._producer.produce(
                            topic,
                            value,
                            key,
                            partition=partition,
                            headers=headers,
                            on_delivery=self._on_delivery,
                        )
                        break
                    except BufferError:
                        self._producer.poll(0.05)
                    except KafkaException as exc:
                        raise translate(exc, f"producing to {topic}", self._partition) from None

    def _partition_count(self, topic: str) -> int:
        """The partitions of heartbeat topic ``topic``, asked each time: heartbeats are
        rare, and a partition added meanwhile gets them from the next one on."""
        found = read_topic(self._producer, topic, self._timeout, self._partition)
        if found is None:
            raise TopicMissingError(
                f"relay partition {self._partition}: heartbeat topic {topic!r} does not exist"
            )
        return len(found.partitions)

    def _refused_error(self, refused: dict[int, str]) -> UndeliverableEventError:
        ids = tuple(sorted(refused))
        return UndeliverableEventError(
            f"relay partition {self._partition}: Kafka refuses outbox rows {list(ids)}: "
            f"{refused[ids[0]]}",
            ids,
            refused[ids[0]],
        )

    def _produce_error(self, exc: KafkaException, record: OutboxRecord) -> Exception:
        err = lib_error(exc)
        if err is None:
            return translate(exc, f"producing to {record.topic}", self._partition)
        if err.code() in RECORD_REFUSED:
            return UndeliverableEventError(
                f"relay partition {self._partition}: Kafka refuses outbox row "
                f"{record.id}: {err.str()}",
                (record.id,),
                f"{err.str()} ({err.name()})",
            )
        if err.code() in TOPIC_MISSING:
            self._topics.forget(record.topic)
            return TopicMissingError(
                f"relay partition {self._partition}: topic {record.topic!r} "
                f"is not available: {err.str()}",
                record.topic,
                (record.id,),
            )
        if err.code() == LibKafkaError._STATE:
            # The transaction ended under this record: it failed (e.g. the broker forgot
            # the transactional id while this instance was paused), or, with one
            # transaction per process, the process aborted it (another partition's part
            # never finished). Abort and read the position again
            # (PartitionRelay._transaction_failed), as after a failed commit; the batch is
            # sent again in the next transaction.
            return RetriableError(
                f"relay partition {self._partition}: producing to {record.topic} refused: "
                f"{err.str()}; the transaction ended under it and is aborted"
            )
        return translate(exc, f"producing to {record.topic}", self._partition)

    def commit(self, position: int) -> None:
        self._commit_offset(
            TopicPartition(
                self._settings.positions_topic, self._partition, position, metadata=self._stamp
            )
        )

    def _refused_delivery(self, err: LibKafkaError) -> Exception | None:
        # The broker refused a record batch: a topic's limit was lowered since it was read.
        # Read the limits again, so that the retry refuses exactly the records at fault.
        self._topics.forget_all()
        return None
