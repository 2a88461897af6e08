"""One relay partition's transactional producer, with its position in Kafka.

The position of relay partition ``p`` is the committed offset of partition ``p`` of the
positions topic, for the positions consumer group. It is written only inside the
producer's transaction (``send_offsets_to_transaction``) and read only after
``init_transactions()`` by a ``read_committed`` consumer, which makes the broker wait
for any pending transactional offset commit instead of returning a stale one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from functools import partial
from operator import attrgetter

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException, Message, Producer, TopicPartition

from relay.errors import (
    AmbiguousCommitError,
    ConfigurationError,
    KafkaError,
    RetriableError,
    TopicMissingError,
    UndeliverableEventError,
)
from relay.kafka.admin import admin_client
from relay.kafka.errors import (
    RECORD_REFUSED,
    TRANSIENT_CODES,
    kafka_reason,
    lib_error,
    translate,
    translate_transactional,
)
from relay.kafka.positions import committed_position, positions_consumer
from relay.kafka.topics import TOPIC_MISSING, TopicGuard, headers_bound
from relay.kafka.transactions import commit_with_offset
from relay.publishing.types import CommittedPosition, OutboxRecord, PositionOwner
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.relay import RelaySettings

log = logging.getLogger(__name__)
# librdkafka's own log lines go through logging (and its secret filter), not raw stderr.
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)

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


class KafkaTransactionalPublisher:
    """Implements :class:`relay.publishing.ports.TransactionalPublisher` with librdkafka."""

    def __init__(self, settings: RelaySettings, partition: int, owner: PositionOwner) -> None:
        self._settings = settings
        self._partition = partition
        self._stamp = owner.stamp()
        self._timeout = max(settings.kafka.request_timeout_s, 30.0)
        self._delivery_error: LibKafkaError | None = None
        self._fenced = False
        base = settings.kafka.client_config()
        self._batch_bytes = int(base.get("batch.size", _LIBRDKAFKA_BATCH_SIZE))
        try:
            self._producer = self._new_producer()
            self._positions = positions_consumer(settings)
        except KafkaException as exc:
            raise ConfigurationError(f"Kafka configuration rejected: {kafka_reason(exc)}") from None
        self._position_tp = TopicPartition(settings.positions_topic, partition)
        self._topics = self._new_topic_guard()

    def _new_producer(self) -> Producer:
        settings = self._settings
        return Producer(
            {
                # retry.backoff.ms: right after a commit, the next transaction's
                # send_offsets_to_transaction is refused (CONCURRENT_TRANSACTIONS) until
                # the broker has written the markers; librdkafka's default back-off
                # (100 ms) then added ~100 ms to every batch.
                **{"linger.ms": "20", "batch.num.messages": "10000", "retry.backoff.ms": "10"},
                **settings.kafka.client_config(),
                # Only a failed delivery calls on_delivery: a success needs nothing.
                "delivery.report.only.error": True,
                "transactional.id": settings.transactional_id(self._partition),
                "enable.idempotence": True,
                "acks": "all",
                "partitioner": "murmur2_random",
                "transaction.timeout.ms": settings.kafka.transaction_timeout_ms,
            },
            logger=_librdkafka_log,
        )

    def _new_topic_guard(self) -> TopicGuard:
        # The AdminClient is created only when a topic's configuration is first read.
        return TopicGuard(
            self._producer,
            partial(admin_client, self._settings.kafka),
            self._partition,
            self._timeout,
        )

    def reset(self) -> None:
        """A new producer with the same transactional.id, after AmbiguousCommitError; the
        old one is dropped without waiting (its transaction state is unknown)."""
        old = self._producer
        try:
            old.purge()
        except KafkaException as exc:
            log.debug("relay partition %d: purging the old producer: %s", self._partition, exc)
        try:
            self._producer = self._new_producer()
        except KafkaException as exc:
            raise ConfigurationError(f"Kafka configuration rejected: {kafka_reason(exc)}") from None
        del old  # librdkafka's destroy, once nothing refers to it any more
        self._topics = self._new_topic_guard()
        self._fenced = False
        self._delivery_error = None
        log.warning(
            "relay partition %d: transactional producer rebuilt; fencing and reading the "
            "position again",
            self._partition,
        )

    def fence(self) -> CommittedPosition:
        # A producer initialises its transactions once; a retried start-up (e.g. after a
        # database error) still owns the partition and only reads the position again.
        if not self._fenced:
            try:
                self._producer.init_transactions(self._timeout)
            except KafkaException as exc:
                raise translate(exc, "init_transactions", self._partition) from None
            self._fenced = True
        try:
            committed = self._positions.committed([self._position_tp], timeout=self._timeout)
        except KafkaException as exc:
            raise translate(exc, "reading the committed position", self._partition) from None
        tp = committed[0]
        if tp.error is not None:
            failed = RetriableError if tp.error.code() in TRANSIENT_CODES else KafkaError
            raise failed(
                f"relay partition {self._partition}: reading the committed position failed: "
                f"{tp.error.str()}"
            )
        return committed_position(tp)

    def begin(self) -> None:
        self._delivery_error = None
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            # _STATE/_CONFLICT: an earlier commit or abort never settled (AmbiguousCommitError)
            raise translate_transactional(exc, "begin_transaction", self._partition) from None

    def _on_delivery(self, err: LibKafkaError | None, _msg: Message) -> None:
        # The broker refuses whole record batches, so a delivery error cannot name the
        # one bad record: TopicGuard refuses those before producing.
        # Keep the error object: calling into librdkafka from this callback while a fatal
        # error is being raised can fail.
        if err is not None and self._delivery_error is None:
            self._delivery_error = err

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
        if err is not None and err.code() in RECORD_REFUSED:
            return UndeliverableEventError(
                f"relay partition {self._partition}: Kafka refuses outbox row "
                f"{record.id}: {err.str()}",
                (record.id,),
                f"{err.str()} ({err.name()})",
            )
        if err is not None and err.code() in TOPIC_MISSING:
            self._topics.forget(record.topic)
            return TopicMissingError(
                f"relay partition {self._partition}: topic {record.topic!r} "
                f"is not available: {err.str()}"
            )
        return translate(exc, f"producing to {record.topic}", self._partition)

    def commit(self, position: int) -> None:
        offset = TopicPartition(
            self._settings.positions_topic, self._partition, position, metadata=self._stamp
        )
        commit_with_offset(
            self._producer,
            offset,
            self._positions,
            timeout=self._timeout,
            commit_error=self._commit_error,
            where=f"relay partition {self._partition}",
        )

    def _commit_error(self, exc: KafkaException, doing: str) -> Exception:
        # A failed commit is retried (after an abort) as before; only an abort or a begin
        # that fails leaves the producer unsettled (AmbiguousCommitError, then reset()).
        error = translate(exc, doing, self._partition)
        if self._delivery_error is not None and self._delivery_error.code() in RECORD_REFUSED:
            # The broker refused a record batch: a topic's limit was lowered since it was
            # read. Read the limits again, so the retry refuses exactly the records at fault.
            self._topics.forget_all()
        if isinstance(error, RetriableError) and self._delivery_error is not None:
            first = self._delivery_error.str()
            return type(error)(f"{error} (first delivery error: {first})")
        return error

    def abort(self) -> None:
        try:
            self._producer.abort_transaction(self._timeout)
        except KafkaException as exc:
            error = translate_transactional(exc, "abort_transaction", self._partition)
            if isinstance(error, RetriableError) and not isinstance(error, AmbiguousCommitError):
                # Not aborted, not known to be aborted: the producer must be rebuilt.
                error = AmbiguousCommitError(f"{error}; the transaction's outcome is unknown")
            raise error from None

    def close(self) -> None:
        """Release the clients; never raises (a fenced producer refuses to flush)."""
        for release in (self._positions.close, lambda: self._producer.flush(0)):
            try:
                release()
            except KafkaException as exc:
                log.debug("relay partition %d: closing: %s", self._partition, exc)
