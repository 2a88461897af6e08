"""A relay partition's heartbeats (relay.publishing.heartbeats, with the fakes): what a
heartbeat may vouch for, in which transaction, and how often."""

from relay.publishing.heartbeats import HeartbeatPlan
from relay.publishing.partition_relay import PartitionRelay
from relay.publishing.types import Settled
from relay.runtime.heartbeat import Heartbeat
from tests.fakes.publishing import OWNER, FakeClock, MemoryKafka, MemoryOutbox, record

DB = OWNER.database_id


def plan(interval_s: float = 5.0) -> HeartbeatPlan:
    return HeartbeatPlan(0, DB, ["beats"], interval_s)


def test_a_time_is_vouched_for_only_once_the_position_reaches_its_top() -> None:
    beats = plan()
    beats.learnt(Settled(top=10, as_of_ms=1_000, partitions=4))
    assert beats.due(0.0, 9) is None  # a row committed before 1000 may be at seq 10
    assert beats.due(0.0, 10) == Heartbeat(DB, 0, 4, 1_000)
    beats.committed(9)
    assert beats.complete_through_ms is None
    beats.committed(10)
    assert beats.complete_through_ms == 1_000


def test_an_older_fact_the_position_covers_is_vouched_for_while_a_newer_one_waits() -> None:
    beats = plan()
    beats.learnt(Settled(top=10, as_of_ms=1_000, partitions=4))
    beats.learnt(Settled(top=20, as_of_ms=2_000, partitions=4))  # more was committed since
    beats.committed(15)
    assert beats.complete_through_ms == 1_000
    beats.learnt(Settled(top=30, as_of_ms=3_000, partitions=4))
    beats.committed(20)
    assert beats.complete_through_ms == 2_000
    beats.committed(30)
    assert beats.complete_through_ms == 3_000


def test_at_most_one_heartbeat_per_interval_and_only_when_the_time_moved_on() -> None:
    beats = plan(interval_s=5.0)
    beats.learnt(Settled(0, 1_000, 4))
    first = beats.due(100.0, 0)
    assert first is not None
    beats.sent(first, 100.0)
    assert beats.due(200.0, 0) is None  # nothing newer to say
    beats.learnt(Settled(0, 2_000, 4))
    assert beats.due(104.0, 0) is None  # too soon
    assert beats.due(105.0, 0) == Heartbeat(DB, 0, 4, 2_000)


def test_without_topics_there_are_no_heartbeats() -> None:
    beats = HeartbeatPlan(0, DB)
    beats.learnt(Settled(0, 1_000, 4))
    assert beats.due(0.0, 10) is None


def test_a_lower_top_for_the_same_time_replaces_the_fact() -> None:
    beats = plan()
    beats.learnt(Settled(top=10, as_of_ms=1_000, partitions=4))
    beats.learnt(Settled(top=5, as_of_ms=1_000, partitions=4))  # rows above 5 are gone
    assert beats.due(0.0, 5) == Heartbeat(DB, 0, 4, 1_000)


def relay(outbox: MemoryOutbox, kafka: MemoryKafka, clock: FakeClock) -> PartitionRelay:
    return PartitionRelay(
        0,
        outbox,
        kafka.publisher(0),
        owner=OWNER,
        clock=clock,
        heartbeat_topics=["beats"],
        heartbeat_interval_s=1.0,
    )


def test_a_batch_carries_the_heartbeat_after_the_records_it_vouches_for() -> None:
    outbox, kafka, clock = MemoryOutbox(), MemoryKafka(), FakeClock()
    outbox.add(record(0, 1), record(0, 2))
    outbox.facts[0] = Settled(top=2, as_of_ms=1_000, partitions=4)
    partition = relay(outbox, kafka, clock)
    partition.start()
    assert partition.publish_batch() is not None
    assert kafka.heartbeats == [(("beats",), Heartbeat(DB, 0, 4, 1_000), 2)]


def test_a_batch_that_does_not_reach_the_top_vouches_for_nothing() -> None:
    outbox, kafka, clock = MemoryOutbox(), MemoryKafka(), FakeClock()
    outbox.add(record(0, 1), record(0, 2))
    outbox.facts[0] = Settled(top=3, as_of_ms=1_000, partitions=4)  # seq 3: not visible yet
    partition = relay(outbox, kafka, clock)
    partition.start()
    partition.publish_batch()
    assert partition.publish_batch() is None
    assert not partition.keep_alive_if_due(3600.0)
    assert kafka.heartbeats == []


def test_an_idle_partition_sends_heartbeats_in_its_keep_alive_transaction() -> None:
    outbox, kafka, clock = MemoryOutbox(), MemoryKafka(), FakeClock()
    partition = relay(outbox, kafka, clock)
    partition.start()
    for at_ms in (1_000, 1_500, 2_000):
        outbox.facts[0] = Settled(top=0, as_of_ms=at_ms, partitions=4)
        assert partition.publish_batch() is None  # found the partition drained
        partition.keep_alive_if_due(3600.0)
        clock.now += 0.6
    # 1_500 came 0.6 s after the first heartbeat, within the interval.
    assert [beat.complete_through_ms for _, beat, _ in kafka.heartbeats] == [1_000, 2_000]
    assert kafka.positions[0].position == 0


def test_a_drain_ends_with_a_heartbeat() -> None:
    outbox, kafka, clock = MemoryOutbox(), MemoryKafka(), FakeClock()
    outbox.add(record(0, 1), record(0, 2), record(0, 3))
    outbox.facts[0] = Settled(top=3, as_of_ms=1_000, partitions=4)
    result = PartitionRelay(
        0,
        outbox,
        kafka.publisher(0),
        owner=OWNER,
        clock=clock,
        batch_size=1,
        heartbeat_topics=["beats"],
    ).drain()
    assert result.position == 3
    assert [(beat.complete_through_ms, after) for _, beat, after in kafka.heartbeats] == [
        (1_000, 3)
    ]
