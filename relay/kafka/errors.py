"""Turning librdkafka errors into the relay's exception tree."""

from __future__ import annotations

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException

from relay.errors import AmbiguousCommitError, KafkaError, ProducerFencedError, RetriableError

FENCED_CODES = frozenset(
    {
        LibKafkaError._FENCED,
        LibKafkaError.PRODUCER_FENCED,
        LibKafkaError.INVALID_PRODUCER_EPOCH,
    }
)

# A transactional call that times out leaves the transaction's outcome unknown; a call
# refused for the producer's state (e.g. begin_transaction after a commit and an abort
# that both timed out) means librdkafka gave up on the transaction without settling it.
AMBIGUOUS_CODES = frozenset(
    {
        LibKafkaError._TIMED_OUT,
        LibKafkaError._STATE,
        LibKafkaError._CONFLICT,
        LibKafkaError._PREV_IN_PROGRESS,
    }
)


# Failures of a request that the same call can get past once the broker answers again
# (a paused or restarting broker, a coordinator that moved): librdkafka does not always
# flag them retriable, e.g. a committed-offsets lookup that timed out.
TRANSIENT_CODES = frozenset(
    {
        LibKafkaError._TIMED_OUT,
        LibKafkaError._TRANSPORT,
        LibKafkaError._ALL_BROKERS_DOWN,
        LibKafkaError._WAIT_COORD,
        LibKafkaError.REQUEST_TIMED_OUT,
        LibKafkaError.COORDINATOR_NOT_AVAILABLE,
        LibKafkaError.NOT_COORDINATOR,
        LibKafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        # A partition between leaders (a topic just created, a broker restarting): the
        # next metadata refresh finds the leader.
        LibKafkaError.NOT_LEADER_FOR_PARTITION,
        LibKafkaError.LEADER_NOT_AVAILABLE,
        LibKafkaError.FENCED_LEADER_EPOCH,
        LibKafkaError.UNKNOWN_LEADER_EPOCH,
    }
)


# Errors that producing one record raises, or that its delivery reports, which retrying the
# same bytes can never fix: the broker refuses the record.
RECORD_REFUSED = frozenset(
    {LibKafkaError.MSG_SIZE_TOO_LARGE, LibKafkaError.INVALID_RECORD, LibKafkaError.INVALID_MSG}
)


def lib_error(exc: BaseException | LibKafkaError) -> LibKafkaError | None:
    """The librdkafka error of a failure: a KafkaException's, or the error itself (an admin
    result's ``errors``, e.g. a consumer-group listing's, hold bare errors)."""
    if isinstance(exc, LibKafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], LibKafkaError):
        return exc.args[0]
    return None


def kafka_reason(exc: BaseException) -> str:
    """librdkafka's text for ``exc``, or the exception's own when it carries no error."""
    err = lib_error(exc)
    return err.str() if err is not None else str(exc)


def translate(
    exc: BaseException | LibKafkaError, doing: str, partition: int | None = None
) -> Exception:
    """The relay error for a librdkafka failure while ``doing`` something."""
    err = lib_error(exc)
    where = f"relay partition {partition}: " if partition is not None else ""
    if err is None:
        return KafkaError(f"{where}{doing} failed: {exc}")
    text = f"{where}{doing} failed: {err.str()} ({err.name()})"
    if err.code() in FENCED_CODES:
        return ProducerFencedError(
            f"{where}producer fenced: another relay instance took over this partition, or "
            "this instance's transaction outlasted transaction.timeout.ms and the broker "
            "aborted it (RELAY_BATCH_BYTES bounds a batch); this instance stops",
            code=err.name(),
        )
    if err.fatal():
        return KafkaError(text, code=err.name())
    if err.txn_requires_abort() or err.retriable() or err.code() in TRANSIENT_CODES:
        return RetriableError(text)
    return KafkaError(text, code=err.name())


def translate_transactional(
    exc: BaseException, doing: str, partition: int | None = None
) -> Exception:
    """:func:`translate` for a transactional call whose failure may leave the transaction
    unsettled: a timeout or a state error is an :class:`AmbiguousCommitError` (rebuild the
    producer, fence, read the position again), unless the error is fatal or fenced."""
    error = translate(exc, doing, partition)
    err = lib_error(exc)
    if (
        err is not None
        and err.code() in AMBIGUOUS_CODES
        and not err.fatal()
        and not isinstance(error, ProducerFencedError)
    ):
        where = f"relay partition {partition}: " if partition is not None else ""
        return AmbiguousCommitError(
            f"{where}{doing} failed: {err.str()} ({err.name()}); the transaction's outcome "
            "is unknown"
        )
    return error


# Refusals that rebuilding the producer cannot get past: a missing permission.
_AUTHORIZATION_CODES = frozenset(
    {
        LibKafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        LibKafkaError.CLUSTER_AUTHORIZATION_FAILED,
        LibKafkaError.TOPIC_AUTHORIZATION_FAILED,
        LibKafkaError.GROUP_AUTHORIZATION_FAILED,
    }
)


def abort_failure(exc: BaseException, doing: str) -> Exception:
    """The error for an ``abort_transaction`` that failed after a failed transaction.
    Unless the producer was fenced or lacks a permission, the transaction is neither
    committed nor known to be aborted, and the producer may be unusable (e.g. a fatal
    ``INVALID_TXN_STATE`` after ``send_offsets_to_transaction`` timed out while a broker
    restarted): an :class:`AmbiguousCommitError`, so that the caller rebuilds the producer
    and fences again, which settles the transaction on the broker."""
    error = translate_transactional(exc, doing)
    err = lib_error(exc)
    if isinstance(error, ProducerFencedError | AmbiguousCommitError):
        return error
    if err is not None and err.code() in _AUTHORIZATION_CODES:
        return error
    return AmbiguousCommitError(f"{error}; the transaction's outcome is unknown")
