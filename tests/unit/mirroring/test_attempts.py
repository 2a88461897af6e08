"""How the consume loop tries a call again: transient errors under the retry policy, and a
batch waiting while one of its records may heal."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from relay.errors import GaveUpError, RecordMayHealError, RetriableError
from relay.mirroring.attempts import Attempts
from relay.mirroring.observer import Unobserved
from relay.mirroring.types import ApplyResult, Batch
from relay.runtime.retry import RetryPolicy
from tests.fakes.publishing import FakeClock

BATCH = Batch("t", 0, 0, 3, ())
DONE = ApplyResult(applied=3, skipped=0)


class Counted(Unobserved):
    def __init__(self) -> None:
        self.retries = 0
        self.resumes = 0

    def retrying(self) -> None:
        self.retries += 1

    def resumed(self) -> None:
        self.resumes += 1


def attempts(
    max_attempts: int | None = 8, record_retries: int = 10
) -> tuple[Attempts, Counted, FakeClock]:
    observer, clock = Counted(), FakeClock()
    policy = RetryPolicy(initial_delay_s=0.2, max_attempts=max_attempts, jitter=0.0)
    return Attempts(policy, clock, threading.Event(), observer, record_retries), observer, clock


def failing(*errors: Exception) -> tuple[Callable[[], str], list[int]]:
    """An action raising ``errors`` one per call, then returning "done"."""
    calls: list[int] = []

    def action() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "done"

    return action, calls


def test_a_call_failing_transiently_is_retried_with_back_off_and_resumes_once() -> None:
    tries, observer, clock = attempts()
    action, calls = failing(*[RetriableError("connection lost")] * 3)
    assert tries.retried(action, "reading offsets") == "done"
    assert len(calls) == 4
    assert (observer.retries, observer.resumes) == (3, 1)
    assert clock.now == pytest.approx(0.2 + 0.4 + 0.8)


def test_a_call_that_succeeds_at_once_tells_the_observer_nothing() -> None:
    tries, observer, clock = attempts()
    assert tries.retried(lambda: "done", "reading offsets") == "done"
    assert (observer.retries, observer.resumes, clock.now) == (0, 0, 0.0)


def test_gives_up_after_the_policys_attempts() -> None:
    tries, observer, _ = attempts(max_attempts=3)
    action, calls = failing(*[RetriableError("connection lost")] * 10)
    with pytest.raises(GaveUpError, match=r"^reading offsets failed 3 times: connection lost$"):
        tries.retried(action, "reading offsets")
    assert len(calls) == 3
    assert (observer.retries, observer.resumes) == (2, 0)


def test_gives_up_at_the_first_failure_when_stopping() -> None:
    tries, observer, clock = attempts()
    tries = tries.until(threading.Event())
    tries.stop.set()
    action, calls = failing(RetriableError("connection lost"))
    with pytest.raises(GaveUpError, match="failed 1 times"):
        tries.retried(action, "reading offsets")
    assert (len(calls), observer.retries, clock.now) == (1, 0, 0.0)


def test_a_record_that_may_heal_is_not_retried_by_the_generic_retry() -> None:
    tries, observer, clock = attempts()
    action, calls = failing(RecordMayHealError("foreign key: no parent yet"))
    with pytest.raises(RecordMayHealError):
        tries.retried(action, "applying t[0]")
    assert (len(calls), observer.retries, clock.now) == (1, 0, 0.0)


def applying(*errors: Exception) -> tuple[Callable[[Batch], ApplyResult], list[Batch]]:
    """An apply raising ``errors`` one per call, then applying; the batches it was given."""
    given: list[Batch] = []

    def apply(batch: Batch) -> ApplyResult:
        given.append(batch)
        if len(given) <= len(errors):
            raise errors[len(given) - 1]
        return DONE

    return apply, given


def test_a_batch_waits_while_a_record_may_heal_then_applies() -> None:
    tries, observer, clock = attempts()
    apply, given = applying(RecordMayHealError("no parent"), RecordMayHealError("no parent"))
    assert tries.applied(apply, BATCH) == (BATCH, DONE)
    assert [batch.waited for batch in given] == [None, None, None]
    assert (observer.retries, observer.resumes) == (2, 0)
    assert clock.now == pytest.approx(0.2 + 0.4)


def test_a_record_that_never_heals_is_left_to_be_dead_lettered_after_record_retries() -> None:
    tries, observer, _ = attempts(record_retries=3)
    apply, given = applying(*[RecordMayHealError("no parent")] * 3)
    assert tries.applied(apply, BATCH) == (Batch("t", 0, 0, 3, (), waited=3), DONE)
    assert [batch.waited for batch in given] == [None, None, None, 3]
    assert observer.retries == 2  # the third refusal waits no more


def test_transient_errors_while_applying_are_retried_as_the_policy_allows() -> None:
    tries, observer, _ = attempts()
    apply, given = applying(RetriableError("connection lost"), RecordMayHealError("no parent"))
    assert tries.applied(apply, BATCH) == (BATCH, DONE)
    assert len(given) == 3
    assert (observer.retries, observer.resumes) == (2, 0)


def test_a_batch_waiting_for_a_record_returns_none_when_stopped() -> None:
    tries, _, _ = attempts()
    tries.stop.set()
    apply, given = applying(RecordMayHealError("no parent"))
    assert tries.applied(apply, BATCH) is None
    assert len(given) == 1
