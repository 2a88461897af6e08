"""A relay partition's batch tried again after failures, as each failure asks: rows that
can never be delivered held back and the rest sent on, a missing topic waited for within
``--missing-topic-wait``, anything else transient retried as the retry policy allows."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from relay.errors import (
    AmbiguousCommitError,
    GaveUpError,
    RetriableError,
    TopicMissingError,
    TransactionTimedOutError,
    UndeliverableEventError,
)
from relay.publishing.holds import PartitionHolds
from relay.publishing.ports import RelayObserver
from relay.publishing.types import BatchResult
from relay.runtime.clock import Clock
from relay.runtime.retry import RetryPolicy

log = logging.getLogger("relay.publishing.partition_relay")  # where it always logged


class BatchRetries:
    """How one relay partition goes on after a batch failed (its holds: the rows that wait
    or were refused)."""

    def __init__(
        self,
        partition: int,
        holds: PartitionHolds,
        retry: RetryPolicy,
        clock: Clock,
        observer: RelayObserver,
    ) -> None:
        self._partition = partition
        self._holds = holds
        self._retry = retry
        self._clock = clock
        self._observer = observer

    def run(
        self,
        attempt: Callable[[], BatchResult | None],
        *,
        position: Callable[[], int],
        in_doubt: Callable[[], None],
        unsettled: Callable[[], bool],
        stop: threading.Event | None,
    ) -> BatchResult | None:
        """``attempt()`` (one batch, its transaction aborted when it raises) until it
        succeeds; ``in_doubt()`` after a commit of unknown outcome (the next attempt
        restarts first), ``unsettled()`` when the producer restarts before the next one.
        None when ``stop`` is set meanwhile (or nothing was pending); GaveUpError when
        the policy gives up."""
        partition, holds = self._partition, self._holds
        attempts = 0
        while True:
            attempts += 1
            try:
                result = attempt()
            except UndeliverableEventError as exc:
                holds.later(exc.outbox_ids, exc.reason)
                attempts = 0  # the rest of the batch goes out in the next transaction
            except RetriableError as exc:
                if isinstance(exc, AmbiguousCommitError):
                    in_doubt()
                missing = exc if isinstance(exc, TopicMissingError) and exc.outbox_ids else None
                if missing is not None and holds.wait_over(missing):
                    attempts = 0  # its rows are dead letters: the batch goes on without them
                    continue
                if missing is None and self._retry.gives_up_after(attempts):
                    raise GaveUpError(
                        f"relay partition {partition}: batch after seq {position()} "
                        f"failed {attempts} times, last error: {exc}"
                    ) from exc
                delay = self._retry.delay(attempts)
                if missing is not None:  # bounded by --missing-topic-wait, not by attempts
                    delay = min(delay, holds.wait_left(missing) + 0.05)
                log.warning(
                    "relay partition %d: %s (%s); retrying in %.1f s",
                    partition,
                    _what_failed(exc, unsettled()),
                    exc,
                    delay,
                    extra={"partition": partition, "attempt": attempts, "delay_s": delay},
                )
                self._observer.retrying(partition, str(exc))
                holds.stalled(exc)
                if self._clock.wait(delay, stop):
                    return None
            else:
                holds.moving()
                self._observer.running(partition, position())
                return result


def _what_failed(exc: RetriableError, unsettled: bool) -> str:
    if isinstance(exc, TransactionTimedOutError):
        return "batch timed out, restarting the producer with a smaller batch"
    if isinstance(exc, AmbiguousCommitError):
        return "batch in doubt, restarting the producer"
    return "batch aborted, restarting the producer" if unsettled else "batch failed"
