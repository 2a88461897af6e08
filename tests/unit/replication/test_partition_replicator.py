"""The replicator's core over in-memory ports: exactly once, in order, committed only."""

from __future__ import annotations

import logging

import pytest

from relay.errors import (
    GaveUpError,
    ProducerFencedError,
    ReplicaPositionError,
)
from relay.replication.partition_replicator import PartitionReplicator
from relay.replication.types import Origin, PositionStamp, ReplicaPosition
from relay.runtime.retry import RetryPolicy
from tests.fakes.publishing import FakeClock
from tests.fakes.replication import ORIGIN, ROUTE, MemorySource, MemoryTarget, source_log


def make(
    source: MemorySource, target: MemoryTarget, clock: FakeClock | None = None, **kw: object
) -> PartitionReplicator:
    return PartitionReplicator(
        ROUTE,
        source.reader(),
        target.writer(),
        origin=ORIGIN,
        clock=clock or FakeClock(),
        **kw,  # type: ignore[arg-type]
    )


def values(target: MemoryTarget) -> list[bytes | None]:
    return [r.value for r in target.copies]


def test_drain_copies_committed_records_in_order_with_the_position() -> None:
    source = MemorySource(source_log(b"a", b"b", None, None, b"c", None, b"d", None))
    target = MemoryTarget()
    result = make(source, target, batch_size=2).drain(source.reader().end_offset())
    assert values(target) == [b"a", b"b", b"c", b"d"]
    assert [r.offset for r in target.copies] == [0, 1, 4, 6]
    # The position is the offset after the last copy; only a marker is left below the end.
    assert target.position == ReplicaPosition(7, PositionStamp(ORIGIN))
    assert (result.records, result.batches, result.next_offset) == (4, 2, 7)


def test_drain_stops_at_the_end_it_was_given() -> None:
    source = MemorySource(source_log(b"a", b"b", b"c", b"d"))
    target = MemoryTarget()
    make(source, target, batch_size=3).drain(2)
    assert values(target) == [b"a", b"b"]
    assert target.position.next_offset == 2


def test_restart_resumes_from_the_committed_position_without_duplicates() -> None:
    source = MemorySource(source_log(b"a", b"b", b"c", b"d"))
    target = MemoryTarget()
    first = make(source, target, batch_size=2)
    first.start()
    first.copy_batch()  # a, b committed; then the instance dies
    make(source, target).drain(4)
    assert values(target) == [b"a", b"b", b"c", b"d"]


def test_a_second_instance_fences_the_first() -> None:
    source = MemorySource(source_log(b"a", b"b", b"c"))
    target = MemoryTarget()
    zombie = make(source, target, batch_size=1)
    zombie.start()
    make(source, target).drain(3)
    with pytest.raises(ProducerFencedError, match="another replicator instance"):
        zombie.copy_batch()
    assert values(target) == [b"a", b"b", b"c"]


def test_a_failed_commit_is_aborted_and_the_partition_restarted() -> None:
    source = MemorySource(source_log(b"a", b"b", b"c"))
    target = MemoryTarget(fail_next_commits=2)
    writer = target.writer()
    replicator = PartitionReplicator(
        ROUTE, source.reader(), writer, origin=ORIGIN, clock=FakeClock(), batch_size=2
    )
    replicator.drain(3)
    assert values(target) == [b"a", b"b", b"c"]
    assert writer.resets == 2  # each failure: a new producer, fenced, position read again


@pytest.mark.parametrize("landed", [True, False])
def test_a_commit_in_doubt_is_settled_by_fencing_again(landed: bool) -> None:
    source = MemorySource(source_log(b"a", b"b", b"c", b"d"))
    target = MemoryTarget(ambiguous_next_commits=[landed])
    make(source, target, batch_size=2).drain(4)
    assert values(target) == [b"a", b"b", b"c", b"d"]


def test_gives_up_after_the_retry_policy_allows() -> None:
    source = MemorySource(source_log(b"a"))
    target = MemoryTarget(fail_next_commits=10)
    replicator = make(source, target, retry=RetryPolicy(max_attempts=3))
    with pytest.raises(GaveUpError, match="failed 3 times"):
        replicator.drain(1)
    assert values(target) == []


def test_a_position_of_another_source_is_refused() -> None:
    source = MemorySource(source_log(b"a"))
    target = MemoryTarget(position=ReplicaPosition(1, PositionStamp(Origin("west", "orders"))))
    with pytest.raises(ReplicaPositionError, match="'west'"):
        make(source, target).start()


def test_a_position_beyond_the_source_end_is_refused() -> None:
    source = MemorySource(source_log(b"a"))  # e.g. the topic was deleted and created again
    target = MemoryTarget(position=ReplicaPosition(50, PositionStamp(ORIGIN)))
    with pytest.raises(ReplicaPositionError, match="beyond the source partition's end"):
        make(source, target).start()
    assert values(target) == []


def test_batches_are_bounded_by_bytes() -> None:
    source = MemorySource(source_log(*(b"x" * 10 for _ in range(6))))
    target = MemoryTarget()
    result = make(source, target, batch_bytes=25).drain(6)
    assert result.batches == 3  # 2 records (key 1 + value 10 bytes each) per transaction
    assert len(target.copies) == 6


def test_a_transaction_the_broker_aborted_for_its_age_is_retried_smaller() -> None:
    clock = FakeClock()
    source = MemorySource(source_log(*(b"v%d" % i for i in range(8))))
    # 8 records take 16 s to send, past the 10 s timeout; 4 take 8 s.
    target = MemoryTarget(clock=clock, transaction_timeout_s=10.0, send_seconds=2.0)
    writer = target.writer()
    replicator = PartitionReplicator(
        ROUTE,
        source.reader(),
        writer,
        origin=ORIGIN,
        clock=clock,
        batch_size=8,
        transaction_timeout_s=10.0,
    )
    result = replicator.drain(8)
    assert values(target) == [b"v%d" % i for i in range(8)]
    assert (result.batches, writer.resets) == (2, 1)


def test_an_idle_partition_keeps_its_position_alive() -> None:
    clock = FakeClock()
    source = MemorySource(source_log(b"a"))
    target = MemoryTarget()
    replicator = make(source, target, clock)
    replicator.drain(1)
    position, commits = target.position, target.commits
    assert not replicator.keep_alive_if_due(60.0)
    clock.now += 61.0
    assert replicator.keep_alive_if_due(60.0)
    assert (target.position, target.commits) == (position, commits + 1)


def test_a_start_up_that_fails_for_a_moment_is_tried_again() -> None:
    source = MemorySource(source_log(b"a", b"b"))
    target = MemoryTarget(fail_next_fences=2)
    result = make(source, target, retry=RetryPolicy(max_attempts=3)).drain(2)
    assert values(target) == [b"a", b"b"]
    assert result.next_offset == 2
    target = MemoryTarget(fail_next_fences=3)
    with pytest.raises(GaveUpError, match="start-up failed 3 times"):
        make(source, target, retry=RetryPolicy(max_attempts=3)).drain(2)


def test_a_routine_start_says_the_partition_is_ready_not_that_it_was_fenced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = MemorySource(source_log(b"a", b"b", b"c"))
    target = MemoryTarget()
    with caplog.at_level(logging.INFO, logger="relay.replication"):
        make(source, target).start()
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        f"{ROUTE}: ready, earlier copiers of this partition fenced; copying from offset 0"
    )


def test_a_position_overtaken_while_it_was_read_is_read_again_not_refused() -> None:
    """A replicator paused while it read its position (answered before another instance
    copied on, the target's last copy read after) is not refused for a position that moved
    back: the position is read again, after the last copy; the instance is fenced at its
    first commit, having copied nothing twice."""
    source = MemorySource(source_log(b"a", b"b", b"c"))
    target = MemoryTarget()
    paused = make(source, target, batch_size=1)
    writer = target.last_writer
    assert writer is not None
    fence = writer.fence

    def answered_then_overtaken() -> ReplicaPosition:
        read = fence()  # no position yet, as the broker answered it
        make(source, target).drain(2)  # meanwhile another instance copies a and b
        return read

    writer.fence = answered_then_overtaken  # type: ignore[method-assign]
    assert paused.start() == 2
    with pytest.raises(ProducerFencedError):
        paused.copy_batch()
    assert values(target) == [b"a", b"b"]
