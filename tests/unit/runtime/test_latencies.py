"""The per-batch latency histogram (relay.runtime.metrics.base.Latencies) counts each event
in the bucket its own age falls in, as a per-event observation would."""

from __future__ import annotations

import random
from bisect import bisect_left

import pytest

from relay.runtime.metrics.base import LATENCY_BUCKETS_S, Latencies


def per_event(committed_s: float, times_ms: list[int]) -> tuple[list[float], float]:
    """Cumulative bucket counts and the sum, one event at a time."""
    counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
    total = 0.0
    for ms in times_ms:
        if ms > 0:
            age = max(0.0, committed_s - ms / 1000)
            counts[bisect_left(LATENCY_BUCKETS_S, age)] += 1
            total += age
    cumulative, seen = [], 0
    for count in counts:
        seen += count
        cumulative.append(float(seen))
    return cumulative, total


def observed(latencies: Latencies) -> tuple[list[float], float]:
    family = latencies.family()
    buckets = [s.value for s in family.samples if s.name.endswith("_bucket")]
    (total,) = [s.value for s in family.samples if s.name.endswith("_sum")]
    return buckets, total


@pytest.mark.parametrize("seed", range(20))
def test_each_event_lands_in_its_own_bucket(seed: int) -> None:
    rng = random.Random(seed)
    committed_s = 1_800_000_000.0 + rng.random()
    now_ms = int(committed_s * 1000)
    ages_ms = [0, 5, 10, 25, 100, 999, 1000, 1001, 60_000, 3_600_000, 7_200_000]
    times = [now_ms - rng.choice(ages_ms) for _ in range(rng.randrange(1, 300))]
    times += [0] * rng.randrange(3) + [now_ms + 2000] * rng.randrange(3)  # none; clocks apart
    times += [now_ms - rng.randrange(8_000_000) for _ in range(rng.randrange(300))]
    rng.shuffle(times)
    latencies = Latencies("x_seconds", "test")
    half = len(times) // 2
    latencies.observe(committed_s, times[:half])  # two batches add up
    latencies.observe(committed_s, times[half:])
    buckets, total = observed(latencies)
    expected_buckets, expected_total = per_event(committed_s, times)
    assert buckets == expected_buckets
    assert total == pytest.approx(expected_total, rel=1e-9, abs=1e-3)


def test_a_batch_without_times_counts_nothing() -> None:
    latencies = Latencies("x_seconds", "test")
    latencies.observe(100.0, [0, 0])
    latencies.observe(100.0, [])
    assert observed(latencies) == ([0.0] * (len(LATENCY_BUCKETS_S) + 1), 0.0)
