"""Back-off with jitter (relay.runtime.retry)."""

from __future__ import annotations

import pytest

from relay.runtime.retry import RetryPolicy


def test_delays_grow_exponentially_up_to_the_cap_and_jitter_only_shortens_them() -> None:
    longest = RetryPolicy(uniform=lambda: 0.0)
    assert [longest.delay(a) for a in (1, 2, 3, 7, 20)] == [0.2, 0.4, 0.8, 10.0, 10.0]
    shortest = RetryPolicy(uniform=lambda: 0.999999)
    assert shortest.delay(1) == pytest.approx(0.15)
    assert shortest.delay(20) == pytest.approx(7.5)


def test_processes_that_failed_together_retry_at_different_times() -> None:
    delays = {RetryPolicy().delay(5) for _ in range(20)}
    assert len(delays) > 1
    assert all(2.4 <= d <= 3.2 for d in delays)


def test_jitter_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=1.5)


def test_attempts() -> None:
    assert RetryPolicy(max_attempts=3).gives_up_after(3)
    assert not RetryPolicy(max_attempts=None).gives_up_after(10**6)
