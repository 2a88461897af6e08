"""Which librdkafka failures the relay tries again and which stop it (relay.kafka.errors)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException

from relay.errors import AmbiguousCommitError, KafkaError, ProducerFencedError, RetriableError
from relay.kafka.errors import abort_failure, translate, translate_transactional


def failure(code: int, text: str = "it failed", *, fatal: bool = False) -> KafkaException:
    return KafkaException(LibKafkaError(code, text, fatal=fatal))


@pytest.mark.parametrize(
    "code",
    [
        LibKafkaError._TIMED_OUT,  # e.g. "Failed to get committed offsets: Local: Timed out"
        LibKafkaError._TRANSPORT,
        LibKafkaError._ALL_BROKERS_DOWN,
        LibKafkaError.NOT_COORDINATOR,
        LibKafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        # A partition between leaders, e.g. of a topic just created: "Failed to get
        # watermark offsets: Broker: Not leader for partition"
        LibKafkaError.NOT_LEADER_FOR_PARTITION,
        LibKafkaError.LEADER_NOT_AVAILABLE,
        LibKafkaError.FENCED_LEADER_EPOCH,
        LibKafkaError.UNKNOWN_LEADER_EPOCH,
    ],
)
def test_a_broker_that_does_not_answer_for_now_is_retried(code: int) -> None:
    error = translate(failure(code), "reading the committed position", 2)
    assert type(error) is RetriableError
    assert str(error).startswith("relay partition 2: reading the committed position failed")


def test_a_bare_error_of_an_admin_result_is_retried_when_transient() -> None:
    """A consumer-group listing's ``errors`` hold bare librdkafka errors: a broker that
    timed out there is retried, as when the call itself raised."""
    error = translate(LibKafkaError(LibKafkaError._TIMED_OUT), "listing the consumer groups")
    assert type(error) is RetriableError
    assert "(_TIMED_OUT)" in str(error)


def test_a_fatal_error_is_not_retried() -> None:
    error = translate(failure(LibKafkaError._TIMED_OUT, fatal=True), "committing", 0)
    assert type(error) is KafkaError


def test_fenced_codes_are_fenced() -> None:
    error = translate(failure(LibKafkaError._FENCED, fatal=True), "commit_transaction", 0)
    assert isinstance(error, ProducerFencedError)
    assert error.exit_code == 5


def test_a_transactional_call_that_times_out_is_ambiguous() -> None:
    error = translate_transactional(failure(LibKafkaError._TIMED_OUT), "abort_transaction", 1)
    assert isinstance(error, AmbiguousCommitError)


def test_an_unknown_topic_is_not_transient() -> None:
    error = translate(failure(LibKafkaError.TOPIC_AUTHORIZATION_FAILED), "producing", 0)
    assert type(error) is KafkaError


@pytest.mark.parametrize(
    "code",
    [
        LibKafkaError.INVALID_TXN_STATE,  # after send_offsets timed out across a restart
        LibKafkaError._TIMED_OUT,
        LibKafkaError._TRANSPORT,
        LibKafkaError.UNKNOWN,
    ],
)
@pytest.mark.parametrize("fatal", [True, False])
def test_an_abort_that_fails_leaves_the_transaction_in_doubt(code: int, fatal: bool) -> None:
    error = abort_failure(failure(code, fatal=fatal), "relay partition 1: abort_transaction")
    assert isinstance(error, AmbiguousCommitError)  # rebuild the producer and fence again


def test_an_abort_refused_for_a_fence_or_a_permission_stops() -> None:
    fenced = abort_failure(failure(LibKafkaError._FENCED, fatal=True), "abort_transaction")
    assert isinstance(fenced, ProducerFencedError)
    denied = failure(LibKafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal=True)
    assert type(abort_failure(denied, "abort_transaction")) is KafkaError
