import logging

import pytest

from relay.errors import GaveUpError, ProducerFencedError
from relay.publishing.partition_relay import PartitionRelay
from relay.publishing.types import CommittedPosition, PositionOwner
from relay.runtime.retry import RetryPolicy
from tests.fakes.publishing import OWNER, FakeClock, MemoryKafka, MemoryOutbox, record


def make(outbox: MemoryOutbox, kafka: MemoryKafka, **kw: object) -> PartitionRelay:
    return PartitionRelay(0, outbox, kafka.publisher(0), owner=OWNER, clock=FakeClock(), **kw)  # type: ignore[arg-type]


def test_drain_publishes_in_batches_and_cleans_up_only_committed_rows() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 8)))
    result = make(outbox, kafka, batch_size=3).drain()
    assert [r.seq for r in kafka.committed] == list(range(1, 8))
    assert (result.records, result.batches, result.position) == (7, 3, 7)
    assert kafka.positions[0] == CommittedPosition(7, OWNER)
    assert outbox.published_floor(0) == 7
    assert outbox.rows[0] == []


def test_drain_stops_at_rows_committed_when_it_started() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(record(0, 1), record(0, 2))
    relay = make(outbox, kafka, batch_size=1)
    relay.start()
    target_rows = outbox.high_water(0)
    original_fetch = outbox.fetch

    def fetch_then_write(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        rows = original_fetch(*args, **kwargs)  # type: ignore[arg-type]
        outbox.add(record(0, outbox.high_water(0) + 1))  # a writer keeps committing
        return rows

    outbox.fetch = fetch_then_write  # type: ignore[method-assign]
    result = relay.drain()
    assert result.position == target_rows == 2


def test_restart_resumes_from_the_committed_position_without_duplicates() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 5)))
    # First instance committed seq 1..2 but crashed before housekeeping.
    kafka.committed.extend(outbox.fetch(0, 0, 2))
    kafka.positions[0] = CommittedPosition(2, OWNER)
    make(outbox, kafka).drain()
    assert [r.seq for r in kafka.committed] == [1, 2, 3, 4]


def test_zombie_is_fenced_and_publishes_nothing() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 4)))
    zombie = make(outbox, kafka, cleanup=False)
    zombie.start()
    make(outbox, kafka, cleanup=False).drain()
    with pytest.raises(ProducerFencedError):
        zombie.publish_batch()
    assert [r.seq for r in kafka.committed] == [1, 2, 3]


def test_retriable_commit_failure_aborts_and_retries_the_same_batch() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka(fail_next_commits=2)
    outbox.add(record(0, 1), record(0, 2))
    relay = make(outbox, kafka, retry=RetryPolicy(initial_delay_s=0.5, max_attempts=5))
    relay.drain()
    assert [r.seq for r in kafka.committed] == [1, 2]


def test_gives_up_after_the_retry_policy_and_keeps_rows() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka(fail_next_commits=10)
    outbox.add(record(0, 1))
    relay = make(outbox, kafka, retry=RetryPolicy(max_attempts=3))
    with pytest.raises(GaveUpError, match="failed 3 times"):
        relay.drain()
    assert kafka.committed == []
    assert len(outbox.rows[0]) == 1


def test_position_is_unknown_before_fencing() -> None:
    relay = make(MemoryOutbox(), MemoryKafka())
    with pytest.raises(RuntimeError, match="fenced"):
        _ = relay.position


def test_a_position_beyond_the_database_is_refused() -> None:
    from relay.errors import ConfigurationError

    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(record(0, 1))
    kafka.positions[0] = CommittedPosition(
        50
    )  # left by another outbox database using the same group
    with pytest.raises(ConfigurationError, match="belongs to another outbox database"):
        make(outbox, kafka).start()
    assert kafka.committed == []


def test_a_position_below_the_recorded_floor_is_refused() -> None:
    from relay.errors import PositionsMismatchError

    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 6)))
    outbox.floors[0] = 3  # published up to 3, then the positions group's offsets were lost
    with pytest.raises(PositionsMismatchError, match="below what this database recorded"):
        make(outbox, kafka, cleanup=False).start()
    assert kafka.committed == []


@pytest.mark.parametrize(
    ("owner", "message"),
    [
        (
            PositionOwner("another-database", OWNER.transactional_id_prefix),
            "another outbox database",
        ),
        (
            PositionOwner(OWNER.database_id, "other-prefix"),
            "transactional-id prefix 'other-prefix'",
        ),
    ],
)
def test_a_position_committed_by_another_owner_is_refused(
    owner: PositionOwner, message: str
) -> None:
    from relay.errors import PositionsMismatchError

    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 6)))
    kafka.positions[0] = CommittedPosition(2, owner)
    with pytest.raises(PositionsMismatchError, match=message):
        make(outbox, kafka).start()
    assert kafka.committed == []


def test_a_position_without_an_owner_is_used_and_the_next_commit_records_ours() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 6)))
    kafka.positions[0] = CommittedPosition(2)  # committed before owners were recorded
    make(outbox, kafka).drain()
    assert [r.seq for r in kafka.committed] == [3, 4, 5]
    assert kafka.positions[0] == CommittedPosition(5, OWNER)


def test_an_idle_drain_commits_its_position_again_to_keep_it_alive() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.assigned = 4  # published and cleaned up: nothing pending
    kafka.positions[0] = CommittedPosition(4)  # no owner recorded yet
    make(outbox, kafka).drain()
    assert kafka.positions[0] == CommittedPosition(4, OWNER)  # re-committed
    assert kafka.committed == []


def test_batches_are_bounded_by_bytes_as_well_as_rows() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 8)))  # key b"k" + value b"v<seq>": 3 bytes
    result = make(outbox, kafka, batch_size=100, batch_bytes=7).drain()
    assert [r.seq for r in kafka.committed] == list(range(1, 8))
    assert result.batches == 4  # 2 + 2 + 2 + 1 rows of 3 bytes within 7 bytes


def test_a_row_larger_than_the_byte_bound_still_goes_alone() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 4)))
    result = make(outbox, kafka, batch_bytes=1).drain()
    assert (result.records, result.batches) == (3, 3)


# An ambiguous commit (issue 11, point 4): commit_transaction times out and the producer
# is unusable. The batch did or did not commit; the relay must find out by fencing with a
# new producer and reading the position again, then neither lose nor repeat a row.


@pytest.mark.parametrize("landed", [True, False], ids=["committed", "not-committed"])
def test_after_an_ambiguous_commit_the_relay_restarts_and_publishes_every_row_once(
    landed: bool,
) -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka(ambiguous_next_commits=[landed])
    outbox.add(*(record(0, s) for s in range(1, 7)))
    publisher = kafka.publisher(0)
    relay = PartitionRelay(0, outbox, publisher, owner=OWNER, clock=FakeClock(), batch_size=3)
    relay.start()
    first = relay.publish_batch()  # commit in doubt, restart, then the batch (again or next)
    assert first is not None
    assert (first.first_seq, first.last_seq) == ((4, 6) if landed else (1, 3))
    while relay.publish_batch() is not None:
        pass
    assert [r.seq for r in kafka.committed] == [1, 2, 3, 4, 5, 6]
    assert kafka.positions[0] == CommittedPosition(6, OWNER)
    assert publisher.resets == 1
    assert kafka.epochs[0] == 2  # fenced again by the new producer
    relay.housekeep()
    assert outbox.rows[0] == []


@pytest.mark.parametrize("landed", [True, False], ids=["committed", "not-committed"])
def test_a_drain_survives_an_ambiguous_commit(landed: bool) -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka(ambiguous_next_commits=[False, landed])
    outbox.add(*(record(0, s) for s in range(1, 8)))
    result = make(outbox, kafka, batch_size=2).drain()
    assert [r.seq for r in kafka.committed] == list(range(1, 8))
    assert result.position == 7


def test_an_ambiguous_keep_alive_restarts_before_the_next_batch() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(record(0, 1))
    publisher = kafka.publisher(0)
    clock = FakeClock()
    relay = PartitionRelay(0, outbox, publisher, owner=OWNER, clock=clock)
    relay.start()
    relay.publish_batch()
    kafka.ambiguous_next_commits.append(True)
    clock.now += 100
    assert relay.keep_alive_if_due(10) is False  # in doubt: logged, not raised
    outbox.add(record(0, 2))
    assert relay.publish_batch() is not None
    assert [r.seq for r in kafka.committed] == [1, 2]
    assert publisher.resets == 1


def test_a_restart_that_fails_is_tried_again_until_the_broker_answers() -> None:
    from relay.errors import RetriableError

    outbox, kafka = MemoryOutbox(), MemoryKafka(ambiguous_next_commits=[False])
    outbox.add(*(record(0, s) for s in range(1, 4)))
    publisher = kafka.publisher(0)
    relay = PartitionRelay(0, outbox, publisher, owner=OWNER, clock=FakeClock())
    relay.start()
    fence, failures = publisher.fence, [RetriableError("init_transactions timed out")] * 2

    def fence_while_the_broker_is_stopped() -> CommittedPosition:
        if failures:
            raise failures.pop()
        return fence()

    publisher.fence = fence_while_the_broker_is_stopped  # type: ignore[method-assign]
    assert relay.publish_batch() is not None
    assert [r.seq for r in kafka.committed] == [1, 2, 3]
    assert publisher.resets == 3  # each attempt starts from a new producer


def test_a_restart_applies_the_start_up_checks() -> None:
    from relay.errors import PositionsMismatchError

    outbox, kafka = MemoryOutbox(), MemoryKafka(ambiguous_next_commits=[False])
    outbox.add(*(record(0, s) for s in range(1, 4)))
    relay = make(outbox, kafka)
    relay.start()
    kafka.positions[0] = CommittedPosition(2, PositionOwner("another-database", "test"))
    with pytest.raises(PositionsMismatchError, match="another outbox database"):
        relay.publish_batch()
    assert kafka.committed == []


class _ExpiredWhilePaused:
    """At its first commit this instance is paused: meanwhile another instance publishes
    seq 1..3 and the broker expires the transactional id, so nobody fences this one; its
    commit then fails (the broker no longer knows its producer id) and is aborted."""

    def __init__(self, outbox: MemoryOutbox, kafka: MemoryKafka) -> None:
        self.outbox, self.kafka, self.fired = outbox, kafka, False

    def hit(self, point: str, partition: int) -> None:
        if point != "before_commit" or self.fired:
            return
        self.fired = True
        self.kafka.committed.extend(self.outbox.fetch(partition, 0, 3))
        self.kafka.positions[partition] = CommittedPosition(3, OWNER)
        self.kafka.fail_next_commits = 1


def test_after_an_aborted_batch_the_position_is_read_again_before_retrying() -> None:
    """A zombie paused past transactional.id.expiration.ms comes back with a producer id
    that fenced nobody (issue 11, point 9): it must not retry from the position it had."""
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 6)))
    zombie = PartitionRelay(
        0,
        outbox,
        kafka.publisher(0),
        owner=OWNER,
        clock=FakeClock(),
        cleanup=False,
        failpoints=_ExpiredWhilePaused(outbox, kafka),
    )
    zombie.drain()
    assert [r.seq for r in kafka.committed] == [1, 2, 3, 4, 5]  # 1..3 once, not again


def test_a_busy_partition_deletes_its_published_rows_at_most_every_interval() -> None:
    """Housekeeping (the floor, deleting published rows) runs after a batch, or when
    nothing is pending, only when the interval has passed since the last time: a partition
    that empties its rows at every batch does not run a database transaction per batch."""
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 7)))
    clock = FakeClock()
    relay = PartitionRelay(
        0,
        outbox,
        kafka.publisher(0),
        owner=OWNER,
        clock=clock,
        batch_size=2,
        housekeeping_every_s=1.0,
    )
    relay.start()
    relay.publish_batch()
    relay.publish_batch()
    assert (outbox.published_floor(0), len(outbox.rows[0])) == (0, 6)  # within the interval
    clock.now += 1.0
    relay.publish_batch()  # seq 5..6, and the interval has passed
    assert (outbox.published_floor(0), outbox.rows[0]) == (6, [])
    outbox.add(record(0, 7))
    relay.publish_batch()
    assert (outbox.published_floor(0), len(outbox.rows[0])) == (6, 1)
    assert relay.publish_batch() is None  # nothing pending, within the interval
    assert (outbox.published_floor(0), len(outbox.rows[0])) == (6, 1)
    clock.now += 1.0
    assert relay.publish_batch() is None  # nothing pending: catch up
    assert (outbox.published_floor(0), outbox.rows[0]) == (7, [])


def test_closing_records_what_was_published() -> None:
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 3)))
    relay = make(outbox, kafka, housekeeping_every_s=60.0)
    relay.start()
    relay.publish_batch()
    assert outbox.published_floor(0) == 0
    relay.close()
    assert (outbox.published_floor(0), outbox.rows[0]) == (2, [])


def test_a_routine_start_says_the_partition_is_ready_not_that_it_was_fenced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Fencing earlier producers is how every start takes a partition over: the line
    says so in words that do not read like an error, and where the relay resumes."""
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    kafka.positions[0] = CommittedPosition(7, OWNER)
    outbox.add(*(record(0, s) for s in range(1, 8)))
    with caplog.at_level(logging.INFO, logger="relay.publishing"):
        make(outbox, kafka).start()
        make(MemoryOutbox(), MemoryKafka()).start()
    assert [r.getMessage() for r in caplog.records] == [
        "relay partition 0: ready, earlier producers of this partition fenced; "
        "resuming after seq 7",
        "relay partition 0: ready, earlier producers of this partition fenced; "
        "nothing published yet",
    ]
    assert (caplog.records[0].partition, caplog.records[0].position) == (0, 7)  # type: ignore[attr-defined]


def test_a_floor_recorded_while_the_position_was_read_does_not_refuse_it() -> None:
    """A process paused while it read its position (a request answered before another
    instance took over, its answer read after) holds an older position than the floor the
    other instance recorded meanwhile. The floor is read before the position: whatever it
    says was in Kafka before the position was asked for, so a floor above the position
    means lost offsets, never a read that was overtaken."""
    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 6)))
    publisher = kafka.publisher(0)
    fence = publisher.fence

    def fence_then_overtaken() -> CommittedPosition:
        read = fence()  # position 0, as the broker answered it
        outbox.floors[0] = 5  # meanwhile: another instance published 1..5, recorded 5
        return read

    publisher.fence = fence_then_overtaken  # type: ignore[method-assign]
    relay = PartitionRelay(0, outbox, publisher, owner=OWNER, clock=FakeClock())
    assert relay.start() == 0


def test_every_batch_announced_to_a_shared_transaction_joins_it_or_withdraws() -> None:
    """A partition announces its batch before it reads its rows (a process's shared
    transaction waits for it): every announcement ends in a transaction joined, or a
    withdrawal, also when the read fails, else the shared transaction would wait on."""
    from relay.errors import RetriableError

    outbox, kafka = MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 6)))
    publisher = kafka.publisher(0)
    relay = PartitionRelay(0, outbox, publisher, owner=OWNER, clock=FakeClock(), batch_size=2)
    relay.start()
    original_fetch, failures = outbox.fetch, [RetriableError("connection lost")]

    def fetch_failing_once(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if failures:
            raise failures.pop()
        return original_fetch(*args, **kwargs)  # type: ignore[arg-type]

    outbox.fetch = fetch_failing_once  # type: ignore[method-assign]
    relay.drain()
    assert [r.seq for r in kafka.committed] == [1, 2, 3, 4, 5]
    # the failed read, withdrawn, then three batches that joined their transactions
    assert (publisher.prepared, publisher.withdrawn) == (4, 1)
