"""TopicGuard refuses exactly the records a topic can never accept, measuring a record only
near its topic's limit: the size bound that lets it skip the rest never under-estimates."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from relay.errors import TopicMissingError
from relay.kafka.publisher import batch_headers_bound, record_headers
from relay.kafka.topics import (
    RECORD_BOUND_OVERHEAD,
    HeaderList,
    TopicGuard,
    headers_bound,
    single_record_batch_size,
)
from relay.publishing.types import OutboxRecord

# Lengths where a varint grows by a byte (zigzag: 63/64, 8191/8192, ...).
VARINT_EDGES = (0, 1, 63, 64, 65, 127, 128, 8191, 8192, 8193, 1_048_575, 1_048_576)
BATCH_SIZE_BYTES = 1_000_000  # the publisher's measure_below (librdkafka's batch.size)


def _text(rng: random.Random, length: int) -> str:
    """ASCII, Latin-1, other planes: 1 to 4 UTF-8 bytes a character."""
    alphabet = "aZ-_.é€😀"
    return "".join(rng.choice(alphabet) for _ in range(length))


def _length(rng: random.Random) -> int:
    return rng.choice(VARINT_EDGES) if rng.random() < 0.3 else rng.randrange(300)


def _data(rng: random.Random) -> bytes | None:
    return None if rng.random() < 0.1 else b"x" * _length(rng)


def _headers(rng: random.Random) -> list[tuple[str, str | bytes | None]]:
    headers: list[tuple[str, str | bytes | None]] = []
    for _ in range(rng.choice((0, 0, 1, 2, 5, 70))):  # 70: the header count's varint grows
        value = rng.choice((None, _text(rng, rng.randrange(40)), _data(rng)))
        headers.append((_text(rng, rng.randrange(1, 30)), value))
    return headers


def test_the_size_bound_never_under_estimates() -> None:
    rng = random.Random(20261123)
    for _ in range(3000):
        key, value, headers = _data(rng), _data(rng), _headers(rng)
        exact = single_record_batch_size(key, value, headers)
        bound = RECORD_BOUND_OVERHEAD + len(key or b"") + len(value or b"") + headers_bound(headers)
        assert exact <= bound, (key, value, headers)
        assert bound - exact <= RECORD_BOUND_OVERHEAD + 20 * len(headers)  # and stays useful


def _record(rng: random.Random, topic: str, outbox_id: int) -> OutboxRecord:
    event_type = rng.choice((None, "Created", _text(rng, rng.randrange(1, 20))))
    user = tuple(
        (_text(rng, rng.randrange(1, 10)), b"h" * rng.randrange(50))
        for _ in range(rng.choice((0, 0, 0, 1, 3)))
    )
    return OutboxRecord(
        outbox_id,
        rng.choice((0, 7, 4095)),
        rng.choice((1, rng.randrange(2**63))),
        topic,
        _data(rng),
        _data(rng),
        event_type,
        user,
    )


def test_the_batch_headers_bound_covers_the_headers_of_every_record() -> None:
    rng = random.Random(7)
    for _ in range(300):
        batch = [
            _record(rng, "t", rng.choice((1, rng.randrange(2**63))))
            for _ in range(rng.randrange(1, 20))
        ]
        assert batch_headers_bound(batch) >= max(headers_bound(record_headers(r)) for r in batch)


# --- TopicGuard against topics of a fake broker ------------------------------------------


class FakeBroker:
    """What TopicGuard asks: list_topics() (as the Producer) and describe_configs() (as
    the AdminClient), for topics with a configuration each."""

    def __init__(self, topics: dict[str, dict[str, str]]) -> None:
        self.topics = topics
        self.described: list[str] = []

    def list_topics(self, topic: str, timeout: float) -> Any:
        found = {topic: SimpleNamespace(error=None)} if topic in self.topics else {}
        return SimpleNamespace(topics=found)

    def describe_configs(self, resources: list[Any]) -> dict[Any, Any]:
        (resource,) = resources
        self.described.append(resource.name)
        entries = {k: SimpleNamespace(value=v) for k, v in self.topics[resource.name].items()}
        return {resource: SimpleNamespace(result=lambda timeout: entries)}


def _guard(broker: FakeBroker) -> TopicGuard:
    fake: Any = broker  # both the Producer and the AdminClient
    return TopicGuard(fake, lambda: fake, 0, 1.0)


class CountingHeaders:
    """record_headers, counting the records it is asked for (measured exactly)."""

    def __init__(self) -> None:
        self.measured: list[int] = []

    def __call__(self, record: OutboxRecord) -> HeaderList:
        self.measured.append(record.id)
        return record_headers(record)


def _check(guard: TopicGuard, records: Sequence[OutboxRecord], headers_of: Any = None) -> Any:
    return guard.check(
        records, headers_of or record_headers, batch_headers_bound(records), BATCH_SIZE_BYTES
    )


def _size(record: OutboxRecord) -> int:
    return single_record_batch_size(record.key, record.value, record_headers(record))


def _batches(rng: random.Random, topics: Sequence[str]) -> Iterator[list[OutboxRecord]]:
    ids = iter(range(1, 10**9))
    for _ in range(150):
        yield [_record(rng, rng.choice(topics), next(ids)) for _ in range(rng.randrange(1, 40))]


def test_the_check_refuses_exactly_what_exact_measuring_refuses() -> None:
    rng = random.Random(11)
    for batch in _batches(rng, ("a", "b", "c", "d")):
        sizes = sorted(_size(r) for r in batch)
        limit = rng.choice(sizes) + rng.choice((-1, 0, 1))  # at a record's exact size
        broker = FakeBroker(
            {
                "a": {"max.message.bytes": str(limit), "cleanup.policy": "delete"},
                "b": {"max.message.bytes": str(limit + 2_000_000)},  # above batch.size
                "c": {"cleanup.policy": "compact"},
                "d": {"max.message.bytes": str(max(sizes) + 3), "cleanup.policy": "compact"},
            }
        )
        check = _check(_guard(broker), batch)
        topics = {r.topic for r in batch}
        expected = {
            r.id
            for r in batch
            if (r.topic in "cd" and r.key is None)
            or (r.topic == "a" and _size(r) > limit)
            or (r.topic == "b" and _size(r) > limit + 2_000_000)
        }
        assert set(check.refused) == expected
        limits = {"a": limit, "b": limit + 2_000_000, "d": max(sizes) + 3}
        for r in batch:
            if r.id in expected and r.topic in "ab":
                assert check.refused[r.id] == (
                    f"{_size(r)} bytes exceed max.message.bytes={limits[r.topic]} "
                    f"of topic {r.topic} (MSG_SIZE_TOO_LARGE)"
                )
        small = {t: n for t, n in limits.items() if n < BATCH_SIZE_BYTES and t in topics}
        assert check.small_limits == small
        assert check.sizes == {r.id: _size(r) for r in batch if r.topic in small}


def test_a_batch_of_records_far_below_the_limits_is_checked_without_measuring() -> None:
    rng = random.Random(3)
    batch = [_record(rng, "big", n) for n in range(1, 500)]
    batch = [r for r in batch if len(r.key or b"") + len(r.value or b"") < 100_000]
    broker = FakeBroker({"big": {"max.message.bytes": "1048588"}})
    headers_of = CountingHeaders()
    check = _check(_guard(broker), batch, headers_of)
    assert (check.refused, check.small_limits, check.sizes) == ({}, {}, {})
    assert headers_of.measured == []


def test_only_records_near_the_limit_are_measured() -> None:
    small = OutboxRecord(1, 0, 1, "big", b"k", b"v" * 100, "Created", ())
    near = OutboxRecord(2, 0, 2, "big", b"k", b"v" * 2_000_000, "Created", ())
    limit = _size(near)
    broker = FakeBroker({"big": {"max.message.bytes": str(limit)}})  # fits exactly
    headers_of = CountingHeaders()
    check = _check(_guard(broker), [small, near], headers_of)
    assert check.refused == {}
    assert headers_of.measured == [2]
    broker.topics["big"]["max.message.bytes"] = str(limit - 1)
    guard = _guard(broker)
    assert list(_check(guard, [small, near]).refused) == [2]


def test_a_refusal_on_cached_limits_reads_them_again() -> None:
    record = OutboxRecord(1, 0, 1, "t", b"k", b"v" * 3000, None, ())
    broker = FakeBroker({"t": {"max.message.bytes": "1000"}})
    guard = _guard(broker)
    assert list(_check(guard, [record]).refused) == [1]
    broker.topics["t"]["max.message.bytes"] = "1000000"  # raised since
    assert _check(guard, [record]).refused == {}
    assert broker.described == ["t", "t"]
    assert _check(guard, [record]).refused == {}  # cached now
    assert broker.described == ["t", "t"]


def test_limits_lowered_below_batch_size_on_reading_again_still_give_every_size() -> None:
    fits = OutboxRecord(1, 0, 1, "t", b"k", b"v" * 10, None, ())
    too_big = OutboxRecord(2, 0, 2, "t", b"k", b"v" * 3_000_000, None, ())
    broker = FakeBroker({"t": {"max.message.bytes": "2000000"}})
    guard = _guard(broker)
    assert _check(guard, [fits]).small_limits == {}
    broker.topics["t"]["max.message.bytes"] = "5000"
    check = _check(guard, [fits, too_big])  # refused on cached limits: read again
    assert list(check.refused) == [2]
    assert check.small_limits == {"t": 5000}
    assert check.sizes[1] == _size(fits)


def test_a_missing_topic_raises_before_anything_is_checked() -> None:
    broker = FakeBroker({"t": {}})
    records = [OutboxRecord(1, 0, 1, "t", b"k", b"v", None, ())]
    records.append(OutboxRecord(2, 0, 2, "gone", b"k", b"v", None, ()))
    with pytest.raises(TopicMissingError, match="'gone' does not exist"):
        _check(_guard(broker), records)
