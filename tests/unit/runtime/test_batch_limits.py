"""A transaction that outlasts transaction.timeout.ms is retried smaller, not taken for a
takeover (issue 11, point 5; relay.runtime.batch_limits)."""

import pytest

from relay.errors import ProducerFencedError, TransactionTimedOutError
from relay.publishing.partition_relay import PartitionRelay
from relay.publishing.types import CommittedPosition
from relay.runtime.batch_limits import BatchLimits
from tests.fakes.publishing import OWNER, FakeClock, MemoryKafka, MemoryOutbox, record


def rows(count: int) -> list:  # type: ignore[type-arg]
    return [record(0, s) for s in range(1, count + 1)]  # b"k" and b"v<seq>"


def test_take_bounds_rows_and_bytes_and_always_takes_one() -> None:
    limits = BatchLimits(max_rows=4, max_bytes=7)
    assert [r.seq for r in limits.take(rows(9))] == [1, 2]
    limits = BatchLimits(max_rows=4, max_bytes=1000)
    assert [r.seq for r in limits.take(rows(9))] == [1, 2, 3, 4]
    assert [r.seq for r in BatchLimits(max_rows=4, max_bytes=1).take(rows(9))] == [1]


def test_a_fence_before_the_timeout_is_not_a_timeout() -> None:
    limits = BatchLimits(max_rows=100, max_bytes=1000, transaction_timeout_s=10)
    assert not limits.timed_out(9.9, rows(50))
    assert (limits.rows, limits.bytes) == (100, 1000)
    assert not BatchLimits(100, 1000).timed_out(3600, rows(50))  # no timeout known


def test_a_timeout_halves_below_what_the_batch_carried_and_quick_commits_grow_back() -> None:
    limits = BatchLimits(max_rows=100, max_bytes=1000, transaction_timeout_s=10)
    assert limits.timed_out(10, rows(40))
    assert (limits.rows, limits.bytes) == (20, 75)  # 9 rows of 3 bytes, 31 of 4: 151
    assert limits.timed_out(12, rows(1))
    assert (limits.rows, limits.bytes) == (1, 1)
    limits.committed(2.6)  # over a quarter of the timeout: stays
    assert (limits.rows, limits.bytes) == (1, 1)
    for _ in range(12):
        limits.committed(0.1)
    assert (limits.rows, limits.bytes) == (100, 1000)


def make(kafka: MemoryKafka, outbox: MemoryOutbox, **kw: object) -> PartitionRelay:
    assert kafka.clock is not None
    return PartitionRelay(
        0,
        outbox,
        kafka.publisher(0),
        owner=OWNER,
        clock=kafka.clock,
        **kw,  # type: ignore[arg-type]
    )


def test_a_batch_that_outlasts_the_transaction_timeout_is_retried_smaller() -> None:
    clock = FakeClock()
    kafka = MemoryKafka(clock=clock, send_seconds_per_record=0.1, transaction_timeout_s=5)
    outbox = MemoryOutbox()
    outbox.add(*rows(100))
    relay = make(kafka, outbox, batch_size=100, transaction_timeout_s=5)

    result = relay.drain()

    assert [r.seq for r in kafka.committed] == list(range(1, 101))  # once, in order
    assert kafka.positions[0] == CommittedPosition(100, OWNER)
    assert result.records == 100
    # 100 rows (10 s) and 50 rows (5 s) timed out; 25 rows (2.5 s) commit, and so on.
    assert kafka.epochs[0] == 1 + 2 * 2  # each timeout: the broker's bump and a new fence


def test_a_fence_within_the_timeout_is_another_instance_and_stops_the_relay() -> None:
    clock = FakeClock()
    kafka = MemoryKafka(clock=clock, send_seconds_per_record=0.1, transaction_timeout_s=5)
    outbox = MemoryOutbox()
    outbox.add(*rows(10))
    zombie = make(kafka, outbox, transaction_timeout_s=5, cleanup=False)
    zombie.start()
    make(kafka, outbox, transaction_timeout_s=5, cleanup=False).start()  # takes over
    with pytest.raises(ProducerFencedError, match=r"another relay instance .* took the"):
        zombie.publish_batch()
    assert kafka.committed == []


def test_a_timeout_the_abort_finds_out_about_is_retried_smaller_too() -> None:
    """The commit fails for another reason (a broker that stopped answering); by the time
    the relay aborts, the broker has aborted the old transaction and the abort finds the
    producer fenced. That is the timeout as well, not another instance."""
    clock = FakeClock()
    kafka = MemoryKafka(
        clock=clock, send_seconds_per_record=0.1, transaction_timeout_s=5, fail_next_commits=1
    )
    outbox = MemoryOutbox()
    outbox.add(*rows(100))

    make(kafka, outbox, batch_size=100, transaction_timeout_s=5).drain()

    assert [r.seq for r in kafka.committed] == list(range(1, 101))


def test_a_fence_error_says_timeout_with_the_new_limits_or_another_instance() -> None:
    limits = BatchLimits(max_rows=100, max_bytes=10_000, transaction_timeout_s=60.0)
    records = [record(0, n) for n in range(40)]
    half = sum(len(r.key or b"") + len(r.value or b"") for r in records) // 2
    fenced = ProducerFencedError("fenced", code="PRODUCER_FENCED")
    words = {"where": "p3", "transaction": "txn of 40", "units": "rows", "taker": "someone"}

    early = limits.fence_error(fenced, 59.0, records, **words)
    assert isinstance(early, ProducerFencedError) and early.code == "PRODUCER_FENCED"
    assert str(early) == (
        "p3: fenced 59.0 s into a transaction, before transaction.timeout.ms: someone; "
        "this instance stops"
    )
    late = limits.fence_error(fenced, 60.0, records, **words)
    assert isinstance(late, TransactionTimedOutError)
    assert "p3: the txn of 40 was open 60.0 s" in str(late)
    assert str(late).endswith(f"next batches carry at most 20 rows and {half} bytes")
