"""One target partition's transactional producer, with the replicated source partition's
position kept on the target cluster (:class:`relay.replication.ports.ReplicaWriter`).

The position of source partition ``topic[p]``, copied to ``target_topic[p]``, is the
committed offset of ``target_topic[p]`` for the replicator's group on the target cluster
(the target topic exists there, so the broker accepts the commit): the next source offset
to copy. It is written only inside the producer's transaction and read only after
``init_transactions()``, by a ``read_committed`` consumer that never joins the group.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from relay.errors import AmbiguousCommitError, ConfigurationError, KafkaError, RetriableError
from relay.kafka.errors import (
    RECORD_REFUSED,
    TRANSIENT_CODES,
    kafka_reason,
    lib_error,
    translate,
    translate_transactional,
)
from relay.kafka.transactions import commit_with_offset
from relay.replication.types import Origin, ReplicaPosition, Route, SourceRecord
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.replicate import ReplicateSettings

log = logging.getLogger(__name__)
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)


def target_positions_consumer(settings: ReplicateSettings) -> Consumer:
    """A read_committed consumer of the replicator's group on the target cluster; it never
    joins the group, it only reads the committed positions (waiting for pending ones)."""
    return Consumer(
        {
            **settings.target.client_config(),
            "group.id": settings.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        },
        logger=_librdkafka_log,
    )


class KafkaReplicaWriter:
    """Implements :class:`relay.replication.ports.ReplicaWriter` with librdkafka."""

    def __init__(
        self,
        settings: ReplicateSettings,
        route: Route,
        origin: Origin,
        max_message_bytes: int | None = None,
    ) -> None:
        self._settings = settings
        self._route = route
        self._where = f"{route} -> {route.target_topic}[{route.partition}]"
        self._stamp = origin.stamp()
        self._provenance = (
            ("relay-source-cluster", origin.cluster.encode()),
            ("relay-source-topic", route.topic.encode()),
            ("relay-source-partition", b"%d" % route.partition),
        )
        self._max_message_bytes = max_message_bytes
        self._timeout = max(settings.target.request_timeout_s, 30.0)
        self._delivery_error: LibKafkaError | None = None
        self._fenced = False
        self._tp = TopicPartition(route.target_topic, route.partition)
        try:
            self._producer = self._new_producer()
            self._positions = target_positions_consumer(settings)
        except KafkaException as exc:
            raise ConfigurationError(
                f"target Kafka configuration rejected: {kafka_reason(exc)}"
            ) from None

    def _new_producer(self) -> Producer:
        settings = self._settings
        config: dict[str, str | int | float | bool] = {
            "linger.ms": "20",
            "batch.num.messages": "10000",
            "retry.backoff.ms": "10",
            **settings.target.client_config(),
            "delivery.report.only.error": True,
            "transactional.id": settings.transactional_id(
                self._route.target_topic, self._route.partition
            ),
            "enable.idempotence": True,
            "acks": "all",
            "transaction.timeout.ms": settings.target.transaction_timeout_ms,
        }
        if self._max_message_bytes is not None:
            # Larger source records than librdkafka's default limit (1 MB) must go through.
            config["message.max.bytes"] = max(
                int(config.get("message.max.bytes", 1_000_000)), self._max_message_bytes
            )
        return Producer(config, logger=_librdkafka_log)

    def fence(self) -> ReplicaPosition:
        if not self._fenced:
            try:
                self._producer.init_transactions(self._timeout)
            except KafkaException as exc:
                raise translate(exc, f"{self._where}: init_transactions") from None
            self._fenced = True
        try:
            found = self._positions.committed([self._tp], timeout=self._timeout)[0]
        except KafkaException as exc:
            raise translate(exc, f"{self._where}: reading the committed position") from None
        if found.error is not None:
            failed = RetriableError if found.error.code() in TRANSIENT_CODES else KafkaError
            raise failed(
                f"{self._where}: reading the committed position failed: {found.error.str()}"
            )
        if found.offset < 0:
            return ReplicaPosition(0)
        return ReplicaPosition(found.offset, Origin.from_stamp(found.metadata))

    def begin(self) -> None:
        self._delivery_error = None
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise translate_transactional(exc, f"{self._where}: begin_transaction") from None

    def _on_delivery(self, err: LibKafkaError | None, _msg: Message) -> None:
        if err is not None and self._delivery_error is None:
            self._delivery_error = err

    def send(self, records: Sequence[SourceRecord]) -> None:
        produce, on_delivery = self._producer.produce, self._on_delivery
        topic, partition, provenance = self._tp.topic, self._tp.partition, self._provenance
        for record in records:
            headers: list[tuple[str, str | bytes | None]] = [
                *record.headers,
                *provenance,
                ("relay-source-offset", b"%d" % record.offset),
            ]
            while True:
                try:
                    produce(
                        topic,
                        record.value,
                        record.key,
                        partition=partition,
                        headers=headers,
                        timestamp=record.timestamp_ms,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.05)
                except KafkaException as exc:
                    raise self._refused(exc, record.offset) from None

    def _refused(self, exc: KafkaException, offset: int) -> Exception:
        err = lib_error(exc)
        if err is not None and err.code() in RECORD_REFUSED:
            return KafkaError(
                f"{self._where}: the target refuses the record at source offset {offset}: "
                f"{err.str()}; raise the target topic's max.message.bytes (and "
                "message.max.bytes with --target-property), then start again",
                code=err.name(),
            )
        return translate(exc, f"{self._where}: producing")

    def commit(self, next_offset: int) -> None:
        offset = TopicPartition(
            self._tp.topic, self._tp.partition, next_offset, metadata=self._stamp
        )
        commit_with_offset(
            self._producer,
            offset,
            self._positions,
            timeout=self._timeout,
            commit_error=self._commit_error,
            where=self._where,
        )

    def _commit_error(self, exc: KafkaException, doing: str) -> Exception:
        if self._delivery_error is not None and self._delivery_error.code() in RECORD_REFUSED:
            err = self._delivery_error
            return KafkaError(
                f"{self._where}: the target refused a record of the batch: {err.str()}; "
                "raise the target topic's max.message.bytes, then start again",
                code=err.name(),
            )
        error = translate(exc, f"{self._where}: {doing}")
        if isinstance(error, RetriableError) and self._delivery_error is not None:
            return type(error)(f"{error} (first delivery error: {self._delivery_error.str()})")
        return error

    def abort(self) -> None:
        try:
            self._producer.abort_transaction(self._timeout)
        except KafkaException as exc:
            error = translate_transactional(exc, f"{self._where}: abort_transaction")
            if isinstance(error, RetriableError) and not isinstance(error, AmbiguousCommitError):
                error = AmbiguousCommitError(f"{error}; the transaction's outcome is unknown")
            raise error from None

    def reset(self) -> None:
        old = self._producer
        try:
            old.purge()
        except KafkaException as exc:
            log.debug("%s: purging the old producer: %s", self._where, exc)
        try:
            self._producer = self._new_producer()
        except KafkaException as exc:
            raise ConfigurationError(
                f"target Kafka configuration rejected: {kafka_reason(exc)}"
            ) from None
        del old
        self._fenced = False
        self._delivery_error = None
        log.warning("%s: producer rebuilt; fencing and reading the position again", self._where)

    def close(self) -> None:
        for release in (self._positions.close, lambda: self._producer.flush(0)):
            try:
                release()
            except KafkaException as exc:
                log.debug("%s: closing: %s", self._where, exc)
