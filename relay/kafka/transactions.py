"""Transactional producers that commit an offset with each transaction: what the forward
relay (its position on the positions topic) and the replicator (a source partition's
position on the target cluster) share."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from relay.errors import AmbiguousCommitError, ConfigurationError, KafkaError, RetriableError
from relay.kafka.errors import (
    RECORD_REFUSED,
    TRANSIENT_CODES,
    abort_failure,
    kafka_reason,
    lib_error,
    translate,
    translate_transactional,
)
from relay.runtime.logs import LIBRDKAFKA_LOGGER

log = logging.getLogger(__name__)
# librdkafka's own log lines go through logging (and its secret filter), not raw stderr.
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)

COMMIT_ATTEMPTS = 3

PRODUCER_DEFAULTS: dict[str, str | int | float | bool] = {
    "linger.ms": "20",
    "batch.num.messages": "10000",
    # Right after a commit, the next transaction's first requests to the coordinator are
    # refused (CONCURRENT_TRANSACTIONS) until the broker has written the commit's markers;
    # librdkafka retries them after retry.backoff.ms, and its default (100 ms) added
    # ~100 ms to every batch. Not lower: at 5 ms (doubling up to 20 ms) rebuilding a
    # producer with a transaction open hit a librdkafka assertion (rdkafka_txnmgr.c,
    # AddPartitionsToTxn) in one run of 14 of the contract test of reset().
    "retry.backoff.ms": "10",
}
"""What a transactional producer of ours sets unless the user's Kafka properties say
otherwise (they come after these)."""

CommitError = Callable[[KafkaException, str], Exception]
"""Turns a failure of ``send_offsets_to_transaction`` or ``commit_transaction`` (the name
is the second argument) into the error to raise."""


def commit_with_offsets(
    producer: Producer,
    offsets: list[TopicPartition],
    group_metadata: object,
    *,
    timeout: float,
    commit_error: CommitError,
    where: str,
) -> None:
    """Add ``offsets`` (for the consumer group ``group_metadata`` describes:
    ``consumer_group_metadata()``; a member's carries its generation, which the broker
    checks) to the open transaction and commit it; a commit that fails retriably without
    needing an abort is tried again, up to COMMIT_ATTEMPTS times, after which its outcome
    is unknown (AmbiguousCommitError)."""
    try:
        producer.send_offsets_to_transaction(offsets, group_metadata, timeout)
    except KafkaException as exc:
        raise commit_error(exc, "send_offsets_to_transaction") from None
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            producer.commit_transaction(timeout)
            return
        except KafkaException as exc:
            error = commit_error(exc, "commit_transaction")
            err = lib_error(exc)
            retriable_in_place = (
                err is not None and err.retriable() and not err.txn_requires_abort()
            )
            if retriable_in_place and attempt == COMMIT_ATTEMPTS:
                # The commit may be under way on the broker: neither committed nor aborted
                # as far as this producer knows.
                raise AmbiguousCommitError(
                    f"{error}; gave up after {attempt} attempts, the transaction's outcome "
                    "is unknown"
                ) from None
            if not retriable_in_place or isinstance(error, AmbiguousCommitError):
                raise error from None
            log.warning("%s: %s; retrying the commit", where, error)


class TransactionalProducer:
    """A transactional producer and the consumer that reads its committed offsets: what
    the forward relay's publisher and the replicator's writer share. It initialises its
    transactions once per producer (fencing older instances of its ``transactional.id``),
    and after a transaction whose outcome is unknown it is dropped and built again
    (:meth:`reset`); its subclasses add what they send and which offset they commit.

    ``where`` starts every message (e.g. ``relay partition 3``); ``config`` builds the
    producer's configuration, again on each rebuild."""

    def __init__(
        self,
        config: Callable[[], dict[str, str | int | float | bool]],
        positions: Callable[[], Consumer],
        *,
        where: str,
        timeout: float,
        cluster: str = "",
    ) -> None:
        self._config = config
        self._where = where
        self._timeout = timeout
        self._cluster = cluster  # "target " for the replicator's, in configuration errors
        self._delivery_error: LibKafkaError | None = None
        self._fenced = False
        try:
            self._positions = positions()
        except KafkaException as exc:
            raise self._rejected(exc) from None
        # The positions consumer never joins its group: its metadata (no member, generation
        # -1) never changes. Asked once: librdkafka answers it from its main thread, and
        # confluent-kafka waits for that holding the GIL, which stalls every other thread.
        self._group_metadata = self._positions.consumer_group_metadata()
        self._producer = self._build()

    def _rejected(self, exc: KafkaException) -> ConfigurationError:
        return ConfigurationError(
            f"{self._cluster}Kafka configuration rejected: {kafka_reason(exc)}"
        )

    def _build(self) -> Producer:
        try:
            return Producer(self._config(), logger=_librdkafka_log)
        except KafkaException as exc:
            raise self._rejected(exc) from None

    def _translate(self, exc: BaseException, doing: str) -> Exception:
        return translate(exc, f"{self._where}: {doing}")

    def _read_committed(self, wanted: TopicPartition) -> TopicPartition:
        """Initialise the transactions (once per producer: a retried start-up still owns
        the partition and only reads again), then read ``wanted``'s committed offset."""
        if not self._fenced:
            try:
                self._producer.init_transactions(self._timeout)
            except KafkaException as exc:
                raise self._translate(exc, "init_transactions") from None
            self._fenced = True
        try:
            found = self._positions.committed([wanted], timeout=self._timeout)[0]
        except KafkaException as exc:
            raise self._translate(exc, "reading the committed position") from None
        if found.error is not None:
            failed = RetriableError if found.error.code() in TRANSIENT_CODES else KafkaError
            raise failed(
                f"{self._where}: reading the committed position failed: {found.error.str()}"
            )
        return found

    def begin(self) -> None:
        self._delivery_error = None
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            # _STATE/_CONFLICT: an earlier commit or abort never settled (AmbiguousCommitError)
            raise translate_transactional(exc, f"{self._where}: begin_transaction") from None

    def _on_delivery(self, err: LibKafkaError | None, _msg: Message) -> None:
        # The broker refuses whole record batches, so a delivery error cannot name the one
        # bad record. Keep the error object: calling into librdkafka from this callback
        # while a fatal error is being raised can fail.
        if err is not None and self._delivery_error is None:
            self._delivery_error = err

    def _commit_offset(self, offset: TopicPartition) -> None:
        commit_with_offsets(
            self._producer,
            [offset],
            self._group_metadata,
            timeout=self._timeout,
            commit_error=self._commit_error,
            where=self._where,
        )

    def _refused_delivery(self, err: LibKafkaError) -> Exception | None:
        """What a commit raises after the broker refused a record batch (``err``, one of
        RECORD_REFUSED); None: the commit's own error."""
        return None

    def _commit_error(self, exc: KafkaException, doing: str) -> Exception:
        # A failed commit is retried (after an abort) as before; only an abort or a begin
        # that fails leaves the producer unsettled (AmbiguousCommitError, then reset()).
        delivered = self._delivery_error
        if delivered is not None and delivered.code() in RECORD_REFUSED:
            refused = self._refused_delivery(delivered)
            if refused is not None:
                return refused
        error = self._translate(exc, doing)
        if isinstance(error, RetriableError) and delivered is not None:
            return type(error)(f"{error} (first delivery error: {delivered.str()})")
        return error

    def abort(self) -> None:
        try:
            self._producer.abort_transaction(self._timeout)
        except KafkaException as exc:
            # Not aborted, not known to be aborted: the producer must be rebuilt.
            raise abort_failure(exc, f"{self._where}: abort_transaction") from None

    def reset(self) -> None:
        """A new producer with the same transactional.id, after a failed transaction; the
        old one is dropped without waiting (its transaction state is unknown).

        The old one is destroyed before the new one is built: librdkafka retries a
        timed-out InitProducerId (the epoch bump an abortable error needs) in the
        background, and if the broker answers it after the new producer's init, it bumps
        the epoch again and fences the new producer."""
        try:
            self._producer.purge()
        except KafkaException as exc:
            log.debug("%s: purging the old producer: %s", self._where, exc)
        del self._producer  # librdkafka's destroy: nothing else refers to it
        self._producer = self._build()
        self._fenced = False
        self._delivery_error = None
        log.warning(
            "%s: transactional producer rebuilt; fencing and reading the position again",
            self._where,
        )

    def close(self) -> None:
        """Release the clients; never raises (a fenced producer refuses to flush)."""
        for release in (self._positions.close, lambda: self._producer.flush(0)):
            try:
                release()
            except (KafkaException, AttributeError) as exc:  # AttributeError: a rebuild failed
                log.debug("%s: closing: %s", self._where, exc)
