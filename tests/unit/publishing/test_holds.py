"""A row for a missing topic holds its relay partition for the bounded wait only; a key's
later rows follow its dead letter (I2); what holds a partition is recorded while it
retries (relay.publishing.holds, through PartitionRelay)."""

from collections.abc import Sequence
from dataclasses import replace

from relay.errors import RetriableError
from relay.publishing.partition_relay import PartitionRelay
from relay.publishing.types import OutboxRecord
from relay.runtime.retry import RetryPolicy
from tests.fakes.publishing import OWNER, FakeClock, MemoryKafka, MemoryOutbox, MemoryTopic

ONCE = RetryPolicy(initial_delay_s=1.0, max_attempts=2, jitter=0.0)  # --once, Spark


def row(seq: int, key: bytes | None, topic: str = "t") -> OutboxRecord:
    return OutboxRecord(seq, 0, seq, topic, key, b"v%d" % seq, None, ())


def relay_of(
    outbox: MemoryOutbox, kafka: MemoryKafka, clock: FakeClock, wait_s: float = 10.0
) -> PartitionRelay:
    return PartitionRelay(
        0,
        outbox,
        kafka.publisher(0),
        owner=OWNER,
        clock=clock,
        retry=ONCE,
        missing_topic_wait_s=wait_s,
    )


def test_a_missing_topic_holds_other_keys_for_the_wait_only_then_is_dead_lettered() -> None:
    outbox, clock = MemoryOutbox(), FakeClock()
    kafka = MemoryKafka(topics={"t": MemoryTopic()})
    outbox.add(row(1, b"a", "typo"), row(2, b"b"), row(3, b"a"), row(4, b"b"), row(5, None))
    result = relay_of(outbox, kafka, clock).drain()  # more attempts than ONCE gives: no GaveUp
    assert [r.seq for r in kafka.committed] == [2, 4, 5]
    assert 10.0 <= clock.now <= 10.5  # the wait, not the retry policy's attempts
    assert result.position == 5
    (missing, follower) = outbox.dead
    assert missing[0] == 1 and "topic 'typo' does not exist" in missing[1]
    assert "--missing-topic-wait 10 s" in missing[1]
    assert follower == (
        3,
        "follows dead letter 1 of the same key: a key's events are "
        "published in their order or not at all (replay them together)",
    )


def test_while_the_topic_stays_missing_its_later_rows_go_at_once() -> None:
    outbox, clock = MemoryOutbox(), FakeClock()
    kafka = MemoryKafka(topics={"t": MemoryTopic()})
    relay = relay_of(outbox, kafka, clock)
    outbox.add(row(1, b"a", "typo"))
    relay.drain()
    waited = clock.now
    outbox.add(row(2, b"c", "typo"), row(3, b"d"))
    relay.drain()
    assert clock.now == waited
    assert [i for i, _ in outbox.dead] == [1, 2]
    assert [r.seq for r in kafka.committed] == [3]


def test_a_row_before_the_dead_letter_of_its_key_is_published_and_rows_after_follow() -> None:
    outbox, clock = MemoryOutbox(), FakeClock()
    kafka = MemoryKafka(topics={"t": MemoryTopic(max_message_bytes=200)})
    big = replace(row(2, b"k"), value=b"x" * 500)
    outbox.add(row(1, b"k"), big, row(3, b"k"), row(4, b"other"), row(5, b"k"))
    relay_of(outbox, kafka, clock).drain()
    assert [r.seq for r in kafka.committed] == [1, 4]
    assert [i for i, _ in outbox.dead] == [2, 3, 5]
    assert all("follows dead letter 1 " in error for _, error in outbox.dead[1:])


def test_what_holds_the_partition_is_recorded_while_it_waits_and_cleared_after() -> None:
    outbox, clock = MemoryOutbox(), FakeClock()
    kafka = MemoryKafka(topics={"t": MemoryTopic()})
    outbox.stalls[0] = (99, "t", "a stale record of a stopped relay")
    relay = relay_of(outbox, kafka, clock, wait_s=600.0)
    relay.start()
    assert relay.publish_batch() is None  # nothing pending: the stale record goes
    assert outbox.stalls == {}
    outbox.add(row(1, b"a", "later"))
    seen: list[object] = []
    original_wait = clock.wait

    def create_the_topic_after_a_while(seconds: float, stop: object = None) -> bool:
        seen.append(outbox.stalls.get(0))
        if len(seen) == 3:
            kafka.topics["later"] = MemoryTopic()  # type: ignore[index]
        return original_wait(seconds)

    clock.wait = create_the_topic_after_a_while  # type: ignore[method-assign]
    assert relay.publish_batch() is not None
    assert seen == [(1, "later", "topic 'later' does not exist")] * 3
    assert outbox.stalls == {}
    assert outbox.dead == []


def test_a_database_failure_while_moving_rows_aside_is_retried_like_a_batch() -> None:
    outbox, clock = MemoryOutbox(), FakeClock()
    kafka = MemoryKafka(topics={"t": MemoryTopic(compacted=True)})
    outbox.add(row(1, None), row(2, b"b"))
    move = outbox.dead_letter
    failures = [RetriableError("the database restarts")]

    def flaky(partition: int, outbox_ids: Sequence[int], error: str) -> int:
        if failures:
            raise failures.pop()
        return move(partition, outbox_ids, error)

    outbox.dead_letter = flaky  # type: ignore[method-assign]
    relay_of(outbox, kafka, clock).drain()
    assert [i for i, _ in outbox.dead] == [1]
    assert [r.seq for r in kafka.committed] == [2]
