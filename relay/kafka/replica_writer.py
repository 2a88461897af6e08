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
from functools import partial

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from relay.errors import KafkaError
from relay.kafka.errors import RECORD_REFUSED, lib_error
from relay.kafka.replica_copies import last_copy, stable_end
from relay.kafka.transactions import PRODUCER_DEFAULTS, TransactionalProducer
from relay.replication.types import (
    NO_POSITION,
    SOURCE_CLUSTER_HEADER,
    SOURCE_OFFSET_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER,
    LastCopy,
    Origin,
    PositionStamp,
    ReplicaPosition,
    Route,
    SourceRecord,
)
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.replicate import ReplicateSettings

_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)
_LARGEST_REQUEST = 1_000_000_000  # librdkafka's largest message.max.bytes


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


class KafkaReplicaWriter(TransactionalProducer):
    """Implements :class:`relay.replication.ports.ReplicaWriter` with librdkafka."""

    def __init__(
        self,
        settings: ReplicateSettings,
        route: Route,
        origin: Origin,
        max_message_bytes: int | None = None,
        compression: str = "none",
    ) -> None:
        self._settings = settings
        self._route = route
        self._compression = compression
        self._provenance: list[tuple[str, str | bytes | None]] = [
            (SOURCE_CLUSTER_HEADER, origin.cluster.encode()),
            (SOURCE_TOPIC_HEADER, route.topic.encode()),
            (SOURCE_PARTITION_HEADER, b"%d" % route.partition),
        ]  # the offset's header follows, per record
        self._max_message_bytes = max_message_bytes
        self._tp = TopicPartition(route.target_topic, route.partition)
        super().__init__(
            self._producer_config,
            partial(target_positions_consumer, settings),
            where=f"{route} -> {route.target_topic}[{route.partition}]",
            timeout=max(settings.target.request_timeout_s, 30.0),
            cluster="target ",
        )

    def _producer_config(self) -> dict[str, str | int | float | bool]:
        settings = self._settings
        config: dict[str, str | int | float | bool] = {
            **PRODUCER_DEFAULTS,
            **settings.target.client_config(),
            "delivery.report.only.error": True,
            "transactional.id": settings.transactional_id(
                self._route.target_topic, self._route.partition
            ),
            "enable.idempotence": True,
            "acks": "all",
            "transaction.timeout.ms": settings.target.transaction_timeout_ms,
            "compression.type": self._compression,  # --target-compression
        }
        if self._compression != "none" and "message.max.bytes" not in config:
            # librdkafka checks each record before compression; the broker checks the
            # compressed batch against the topic's max.message.bytes: that is the limit.
            config["message.max.bytes"] = _LARGEST_REQUEST
        elif self._max_message_bytes is not None:
            # Larger source records than librdkafka's default limit (1 MB) must go through.
            config["message.max.bytes"] = max(
                int(config.get("message.max.bytes", 1_000_000)), self._max_message_bytes
            )
        return config

    def fence(self) -> ReplicaPosition:
        found = self._read_committed(self._tp)
        if found.offset < 0:
            return NO_POSITION
        return ReplicaPosition(found.offset, PositionStamp.from_text(found.metadata))

    def position(self) -> ReplicaPosition:
        return self.fence()  # fenced once per producer: from then on, only a read

    def last_copy(self, since: int) -> LastCopy | None:
        return last_copy(self._settings, self._tp, since)

    def stable_end(self) -> int:
        return stable_end(self._settings, self._tp)

    def send(self, records: Sequence[SourceRecord]) -> None:
        # Per record: keep this loop lean (docs/performance.md). The provenance headers
        # are built once per writer; only the source offset differs per record.
        produce, on_delivery = self._producer.produce, self._on_delivery
        topic, partition, provenance = self._tp.topic, self._tp.partition, self._provenance
        offset_header = SOURCE_OFFSET_HEADER
        for record in records:
            own = record.headers
            headers = [*own, *provenance] if own else provenance.copy()
            headers.append((offset_header, b"%d" % record.offset))
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
                except BufferError:  # the queue is full: wait for room, then again
                    self._producer.poll(0.05)
                except KafkaException as exc:
                    raise self._refused(exc, record.offset) from None

    def _refused(self, exc: KafkaException, offset: int) -> Exception:
        err = lib_error(exc)
        if err is not None and err.code() in RECORD_REFUSED:
            return KafkaError(
                f"{self._where}: the target refuses the record at source offset {offset}: "
                f"{err.str()}; compress it (--target-compression: the source's codec by "
                "default) or raise the target topic's max.message.bytes (and "
                "message.max.bytes with --target-property), then start again",
                code=err.name(),
            )
        return self._translate(exc, "producing")

    def commit(self, next_offset: int, stamp: PositionStamp) -> None:
        self._commit_offset(
            TopicPartition(self._tp.topic, self._tp.partition, next_offset, metadata=stamp.text())
        )

    def _refused_delivery(self, err: LibKafkaError) -> Exception | None:
        return KafkaError(
            f"{self._where}: the target refused a record of the batch: {err.str()}; raise "
            "the target topic's max.message.bytes, then start again",
            code=err.name(),
        )
