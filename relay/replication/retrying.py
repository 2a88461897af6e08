"""A replicated partition's start-up or batch tried again after transient errors (a broker
restarting on either side), as the retry policy allows."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from relay.errors import AmbiguousCommitError, GaveUpError, RetriableError
from relay.replication.ports import ReplicaObserver
from relay.replication.types import Route
from relay.runtime.clock import Clock
from relay.runtime.retry import RetryPolicy

log = logging.getLogger("relay.replication.partition_replicator")  # where it always logged

T = TypeVar("T")


def retrying(
    route: Route,
    what: Callable[[], str],
    attempt: Callable[[], T],
    stop: threading.Event | None,
    *,
    retry: RetryPolicy,
    clock: Clock,
    observer: ReplicaObserver,
    in_doubt: Callable[[], None],
) -> T | None:
    """``attempt()`` until it succeeds, waiting the retry policy's delay after each
    transient error (``in_doubt()`` after a commit of unknown outcome: the next attempt
    restarts first); GaveUpError when the policy gives up, None when ``stop`` is set."""
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt()
        except RetriableError as exc:
            if isinstance(exc, AmbiguousCommitError):
                in_doubt()
            if retry.gives_up_after(attempts):
                raise GaveUpError(
                    f"{route}: {what()} failed {attempts} times, last error: {exc}"
                ) from exc
            delay = retry.delay(attempts)
            log.warning(
                "%s: %s failed (%s); retrying in %.1f s",
                route,
                what(),
                exc,
                delay,
                extra={
                    "topic": route.topic,
                    "partition": route.partition,
                    "attempt": attempts,
                    "delay_s": delay,
                },
            )
            observer.retrying(route.topic, route.partition)
            if clock.wait(delay, stop):
                return None
