"""Committing a producer's transaction together with an offset: the step the forward
relay (its position on the positions topic) and the replicator (a source partition's
position on the target cluster) share."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from relay.errors import AmbiguousCommitError
from relay.kafka.errors import lib_error

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 3

CommitError = Callable[[KafkaException, str], Exception]
"""Turns a failure of ``send_offsets_to_transaction`` or ``commit_transaction`` (the name
is the second argument) into the error to raise."""


def commit_with_offset(
    producer: Producer,
    offset: TopicPartition,
    group: Consumer,
    *,
    timeout: float,
    commit_error: CommitError,
    where: str,
) -> None:
    """Add ``offset`` (for ``group``'s consumer group) to the open transaction and commit
    it; a commit that fails retriably without needing an abort is tried again, up to
    COMMIT_ATTEMPTS times, after which its outcome is unknown (AmbiguousCommitError)."""
    try:
        producer.send_offsets_to_transaction([offset], group.consumer_group_metadata(), timeout)
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
