"""One relay partition's publisher inside its process's shared transaction
(one transaction per process, :mod:`relay.kafka.member_transactions`).

It sends as :class:`~relay.kafka.publisher.KafkaTransactionalPublisher` does, through
the process's producer; :meth:`begin` joins the process's open transaction and
:meth:`commit` hands the partition's new position in and returns once the transaction
ended, with its outcome. :meth:`fence` fences `--once` runs and Spark tasks of the
partition (once per assignment) and reads the committed position (read_committed: a
pending transactional offset commit is waited for).
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException, Producer, TopicPartition

from relay.errors import RetriableError
from relay.kafka.departed_members import MEMBER_FIELD
from relay.kafka.errors import RECORD_REFUSED
from relay.kafka.member_transactions import MemberTransactions
from relay.kafka.positions import committed_position
from relay.kafka.publisher import KafkaTransactionalPublisher
from relay.publishing.types import CommittedPosition, OutboxRecord, PositionOwner
from relay.settings.relay import RelaySettings

log = logging.getLogger(__name__)


class MemberPartitionPublisher(KafkaTransactionalPublisher):
    """Implements :class:`relay.publishing.ports.TransactionalPublisher` over the
    process's shared transaction."""

    def __init__(
        self,
        settings: RelaySettings,
        partition: int,
        owner: PositionOwner,
        transactions: MemberTransactions,
    ) -> None:
        self._transactions = transactions
        self._once_runs_fenced = False
        super().__init__(settings, partition, owner)
        self._fenced = True  # the process's producer initialised its transactions
        if not settings.member_id:  # named: relay.kafka.departed_members may fence it
            self._stamp = owner.stamp(**{MEMBER_FIELD: transactions.transactional_id})

    def _build(self) -> Producer:
        return self._transactions.producer

    def _follow_producer(self) -> None:
        """After the process rebuilt its producer (a commit in doubt), use the new one."""
        if self._producer is not self._transactions.producer:
            self._producer = self._transactions.producer
            self._topics = self._new_topic_guard()

    def fence(self) -> CommittedPosition:
        if not self._once_runs_fenced:
            self._transactions.fence_once_runs(self._partition)
            self._once_runs_fenced = True
        self._transactions.end_departed(self._partition)
        self._follow_producer()
        return committed_position(self._read_committed(self._position_tp))

    def _produce_error(self, exc: KafkaException, record: OutboxRecord) -> Exception:
        return self._transactions.after_fence(super()._produce_error(exc, record))

    def prepare(self) -> None:
        self._transactions.prepare(self._partition)

    def withdraw(self) -> None:
        self._transactions.withdraw(self._partition)

    def begin(self) -> None:
        self._delivery_error = None
        self._transactions.begin(self._partition)  # may rebuild the process's producer
        self._follow_producer()

    def commit(self, position: int) -> None:
        offset = TopicPartition(
            self._settings.positions_topic, self._partition, position, metadata=self._stamp
        )
        error = self._transactions.finish(self._partition, offset)
        if error is None:
            return
        delivered = self._delivery_error
        if delivered is not None and delivered.code() in RECORD_REFUSED:
            self._refused_delivery(delivered)
        if isinstance(error, RetriableError) and delivered is not None:
            raise type(error)(f"{error} (first delivery error: {delivered.str()})") from None
        raise error

    def abort(self) -> None:
        error = self._transactions.finish(self._partition, None)
        if error is not None and not isinstance(error, RetriableError):
            raise error

    def reset(self) -> None:
        """The process's producer is rebuilt by the transaction that needed it; this
        partition only follows it."""
        self._follow_producer()
        self._delivery_error = None

    def close(self) -> None:
        # A thread that stops with its part of the transaction unfinished aborts it.
        self._transactions.withdraw(self._partition)
        self._transactions.finish(self._partition, None)
        try:
            self._positions.close()
        except KafkaException as exc:
            log.debug("relay partition %d: closing: %s", self._partition, exc)
