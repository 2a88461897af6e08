"""One Kafka transaction per `relay run` process and cycle (the default; not with
``--partition-transactions``).

The process joins the positions group itself (cooperative-sticky, subscribed to the
positions topic, whose partition ``p`` stands for relay partition ``p``), and one
transactional producer (``transactional.id`` ``<prefix>-member-<random>``) carries the
records of every relay partition it holds. The relay partitions' threads share its
transactions (:mod:`relay.publishing.shared_transaction`: who is in a transaction, and
when it ends); the transaction that ends::

    the consumer's group metadata (member id and generation; a process that is no longer
    a member has generation -1: abort, never commit)
    -> send_offsets_to_transaction(every position, metadata)
    -> commit_transaction (or abort_transaction after any failure)

The broker refuses the positions of a member whose generation is stale (it was silent
past the session timeout and the group gave its partitions to another member:
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID), so a zombie's whole transaction is aborted (I3).
A partition being revoked finishes its batch (its transaction commits or aborts) before
the revoke callback returns. A member that takes a partition over reads its position
with a read_committed consumer, which waits for a pending transactional offset commit.
Before that, it initialises the partition's own transactional id ``<prefix>-<p>`` once,
which fences a `--once` run or Spark task that started before it joined.

A process killed with its transaction open leaves it open on the broker; until it is
aborted, read_committed readers of the topic partitions it wrote to wait. Without
``--member-id`` every position the process commits names it, and the member that takes a
relay partition over fences the process the position names once it is gone from the
group, which aborts that transaction at once (:mod:`relay.kafka.departed_members`). A
process fenced so, gone from the group for a while but alive, goes on with a new producer
(its stale generation still keeps it from committing). With ``--member-id NAME`` the
transactional id is ``<prefix>-member-NAME`` and the process a static member of the group
(``group.instance.id`` NAME): restarted under the same name, it gets its relay partitions
back without a rebalance, and its ``init_transactions`` aborts what its predecessor left
open at once; stopped for good, it leaves its open transaction to the broker's
``transaction.timeout.ms``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaException, Producer, TopicPartition

from relay.errors import (
    AmbiguousCommitError,
    ConfigurationError,
    KafkaError,
    ProducerFencedError,
    RetriableError,
)
from relay.kafka.departed_members import DepartedMembers, PositionsGroupView
from relay.kafka.errors import abort_failure, kafka_reason, translate, translate_transactional
from relay.kafka.membership import KafkaMembership, Partitions
from relay.kafka.transactions import PRODUCER_DEFAULTS, commit_with_offsets
from relay.publishing.shared_transaction import SharedTransaction
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.relay import RelaySettings

log = logging.getLogger(__name__)
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)

_METADATA_MAGIC = b"CGMDv2:"
_FATAL = "_FATAL"  # librdkafka's name for a call on a producer that failed fatally


def member_generation(metadata: object) -> int:
    """The generation in librdkafka's serialized consumer group metadata (``CGMDv2:``,
    then the generation as an int32 in the host's byte order, little-endian here); -1:
    not a member of the group."""
    data = bytes(metadata) if isinstance(metadata, bytes | bytearray) else b""
    end = len(_METADATA_MAGIC) + 4
    if not data.startswith(_METADATA_MAGIC) or len(data) < end:
        return -1
    return int.from_bytes(data[len(_METADATA_MAGIC) : end], "little", signed=True)


class StaleMemberError(RetriableError):
    """This process is no longer a member of the positions group: its transaction was
    aborted; the group hands its relay partitions on (or back) when it polls."""


class MemberTransactions:
    """This process's membership of the positions group and its one transactional
    producer; :meth:`poll` runs ``assigned`` and ``revoked`` on the polling thread."""

    def __init__(
        self,
        settings: RelaySettings,
        relay_partitions: int,
        *,
        assigned: Partitions,
        revoked: Partitions,
    ) -> None:
        self._settings = settings
        self._timeout = max(settings.kafka.request_timeout_s, 30.0)
        name = settings.member_id or uuid.uuid4().hex[:12]
        self.transactional_id = f"{settings.prefix}-member-{name}"
        self._assigned = assigned
        self._membership = KafkaMembership(
            settings,
            relay_partitions,
            assigned=self._on_assigned,
            revoked=revoked,
            group=settings.group,
            instance_id=settings.member_id,
            client_id=self.transactional_id,
        )
        self._group_view = PositionsGroupView(settings)
        self._departed = DepartedMembers(
            self.transactional_id,
            self._initialise,
            self._group_view.last_committer,
            self._group_view.members,
            settings.group,
        )
        try:
            self.producer = Producer(self._producer_config(), logger=_librdkafka_log)
        except KafkaException as exc:
            raise ConfigurationError(f"Kafka configuration rejected: {kafka_reason(exc)}") from None
        self._shared: SharedTransaction[TopicPartition] = SharedTransaction(
            opening=self._open,
            ending=self._end,
            joining=self._follow_fence,
            wait_s=settings.kafka.transaction_timeout_ms / 1000,
        )
        self._rebuild = False
        self._lock = threading.Lock()  # for the metadata
        self._metadata: object = b""  # the consumer's group metadata after the last poll

    def _producer_config(self) -> dict[str, str | int | float | bool]:
        return {
            **PRODUCER_DEFAULTS,
            **self._settings.kafka.client_config(),
            "delivery.report.only.error": True,
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "transaction.timeout.ms": self._settings.kafka.transaction_timeout_ms,
        }

    # The membership: relay.kafka.membership.KafkaMembership, in the positions group.

    def join(self) -> None:
        try:
            self.producer.init_transactions(self._timeout)
        except KafkaException as exc:
            raise translate(exc, "relay process: init_transactions") from None
        self._membership.join()

    def poll(self, timeout: float) -> None:
        self._membership.poll(timeout)
        metadata = self._membership.group_metadata()
        with self._lock:
            self._metadata = metadata

    def _on_assigned(self, partitions: Sequence[int]) -> None:
        """The group metadata of the new generation first: the partitions' first
        transactions may end before this poll returns."""
        metadata = self._membership.group_metadata()
        with self._lock:
            self._metadata = metadata
        self._assigned(partitions)

    def close(self) -> None:
        """Leave the group (after the partitions' threads ended: no transaction is open)."""
        self._membership.close()
        self._group_view.close()
        try:
            self.producer.flush(0)
        except KafkaException as exc:
            log.debug("relay process: closing: %s", exc)

    def fence_once_runs(self, partition: int) -> None:
        """Initialise relay partition ``partition``'s own transactional id once: a `--once`
        run or Spark task that uses it is fenced (and its open transaction aborted)."""
        try:
            self._initialise(self._settings.transactional_id(partition))
        except KafkaException as exc:
            raise translate(exc, "init_transactions", partition) from None

    def end_departed(self, partition: int) -> None:
        """Abort the transaction a process that left the group (killed, say) may have
        left open, if ``partition``'s position names it (:mod:`.departed_members`)."""
        self._departed.end_transaction_left_by(partition)

    def _initialise(self, transactional_id: str) -> None:
        """``init_transactions`` under ``transactional_id``: its previous user is fenced
        and its open transaction aborted."""
        config = self._producer_config()
        config["transactional.id"] = transactional_id
        producer = Producer(config, logger=_librdkafka_log)
        try:
            producer.init_transactions(self._timeout)
        finally:
            producer.flush(0)

    # The shared transaction: relay.publishing.shared_transaction says who is in it and
    # when it ends; the calls to the producer are these.

    def prepare(self, partition: int) -> None:
        self._shared.prepare(partition)

    def withdraw(self, partition: int) -> None:
        self._shared.withdraw(partition)

    def begin(self, partition: int) -> None:
        self._shared.begin(partition)

    def finish(self, partition: int, position: TopicPartition | None) -> Exception | None:
        return self._shared.finish(partition, position)

    def _follow_fence(self) -> None:
        """At every partition's begin: a producer fenced or in doubt is rebuilt first."""
        if self._rebuild:
            self._rebuild_producer()

    def _open(self) -> None:
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            error = translate_transactional(exc, "relay process: begin_transaction")
            raise self.after_fence(error) from None

    def _end(
        self, txn: int, arrived: Mapping[int, TopicPartition | None], doomed: str | None
    ) -> Exception | None:
        """Commit the open transaction with every position, or abort it."""
        if doomed is not None:
            failed = RetriableError(f"relay process: transaction aborted: {doomed}")
            return self._abort(failed)
        # As of the last poll: asking the consumer from this thread blocks while the
        # polling thread is in a revoke callback, which waits for this transaction.
        with self._lock:
            metadata = self._metadata
        generation = member_generation(metadata)
        log.debug(
            "relay process: ending transaction %d of relay partitions %s (generation %d)",
            txn,
            sorted(arrived),
            generation,
        )
        if generation < 0:
            return self._abort(
                StaleMemberError(
                    f"relay process: no longer a member of group {self._settings.group} "
                    "(silent past the session timeout, or left): transaction aborted, the "
                    "group hands its relay partitions on"
                )
            )
        offsets = [tp for _, tp in sorted(arrived.items()) if tp is not None]
        try:
            commit_with_offsets(
                self.producer,
                offsets,
                metadata,
                timeout=self._timeout,
                commit_error=lambda exc, doing: translate_transactional(
                    exc, f"relay process (generation {generation}): {doing}"
                ),
                where="relay process",
            )
        except AmbiguousCommitError as exc:
            self._rebuild_producer()
            return exc
        except RetriableError as exc:
            return self._abort(exc)
        except Exception as exc:  # fatal: every partition's thread stops the process
            return self.after_fence(exc)
        return None

    def _abort(self, error: Exception) -> Exception:
        try:
            self.producer.abort_transaction(self._timeout)
        except KafkaException as exc:
            failure = abort_failure(exc, "relay process: abort_transaction")
            if isinstance(failure, AmbiguousCommitError):
                self._rebuild_producer()
            return self.after_fence(failure)
        return error

    def after_fence(self, error: Exception) -> Exception:
        """A process without --member-id is fenced only by a member that found it gone
        from the group (:mod:`.departed_members`): out of the group for a while, it lost
        its open transaction, and goes on with a new producer (a stale generation still
        keeps it from committing). ``error``: the fence, or a produce refused because the
        fence left the producer failed (``_FATAL``). Fenced under its --member-id,
        another process has its name: ``error`` stands, as does any other error."""
        fenced = isinstance(error, ProducerFencedError) or (
            isinstance(error, KafkaError) and error.code == _FATAL
        )
        if not fenced or self._settings.member_id:
            return error
        self._rebuild = True  # before the next transaction
        return RetriableError(
            f"relay process: {error}; a member found this process gone from group "
            f"{self._settings.group} and aborted its transaction; a new producer goes on"
        )

    def _rebuild_producer(self) -> None:
        """A new producer with the same transactional id, initialised: settles the
        transaction in doubt on the broker before any partition reads its position."""
        self._rebuild = True
        try:
            self.producer.purge()
        except KafkaException as exc:
            log.debug("relay process: purging the old producer: %s", exc)
        self.producer = Producer(self._producer_config(), logger=_librdkafka_log)
        try:
            self.producer.init_transactions(self._timeout)
        except KafkaException as exc:
            log.warning("relay process: init_transactions after a commit in doubt: %s", exc)
            return  # tried again at the next begin
        self._rebuild = False
        log.warning("relay process: transactional producer rebuilt after a commit in doubt")
