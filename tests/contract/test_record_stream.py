"""Contract of :class:`relay.mirroring.ports.RecordStream`: the in-memory ``FakeStream``
and ``KafkaRecordStream`` (read_committed) on the real broker.

Both read one topic of two partitions that a transactional producer writes to. A
transaction of n records takes n offsets and one more for its commit or abort marker;
the fake's logs are laid out the same way, so offsets agree exactly. For the broker, each
write waits (polling the watermarks) until its markers are written, since
``commit_transaction()`` returns before that.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

import pytest
from confluent_kafka import Producer

from relay.errors import KafkaError
from relay.kafka.record_stream import KafkaRecordStream
from relay.mirroring.ports import RecordStream
from relay.mirroring.types import KafkaRecord, PartitionEnd, TopicPartitionKey
from relay.settings.connections import KafkaSettings
from tests.contract.conftest import TIMEOUT_S, Watermarks, memory_and
from tests.fakes.mirroring import FakeStream

Event = KafkaRecord | PartitionEnd


class Listener:
    """Starts each partition where ``starts`` says (the beginning when absent)."""

    def __init__(self, starts: Mapping[TopicPartitionKey, int | None]) -> None:
        self._starts = starts
        self.assigned_calls: list[list[TopicPartitionKey]] = []

    def assigned(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> Mapping[TopicPartitionKey, int | None]:
        self.assigned_calls.append(list(partitions))
        return {tp: self._starts.get(tp) for tp in partitions}

    def revoked(self, partitions: Sequence[TopicPartitionKey]) -> None:
        pass


class StreamHarness(Protocol):
    topic: str
    stream: RecordStream

    def assign(self, starts: Mapping[TopicPartitionKey, int | None]) -> Listener:
        """Assign the topic's partitions (``assign`` of both implementations, which the
        core's ``--once`` runs and Spark tasks use) with a listener returning ``starts``."""
        ...

    def commit(self, partition: int, count: int) -> list[KafkaRecord]:
        """One committed transaction of ``count`` records; returns them."""
        ...

    def abort(self, partition: int, count: int) -> None:
        """One transaction of ``count`` records that reach the log, then is aborted."""
        ...

    def open(self, partition: int, count: int) -> Callable[[], list[KafkaRecord]]:
        """A transaction with ``count`` records in the log, left open; returns the
        function that commits it (and returns its records)."""
        ...


class Counter:
    """Offsets of each partition as a transactional producer lays them out, and the
    content of each record written."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.next: dict[int, int] = {0: 0, 1: 0}
        self._n = 0
        self._stamped_from = int(time.time() * 1000) - 60_000  # recent: within retention

    def records(self, partition: int, count: int) -> list[KafkaRecord]:
        first = self.next[partition]
        self.next[partition] += count
        result = []
        for offset in range(first, first + count):
            self._n += 1
            result.append(
                KafkaRecord(
                    self.topic,
                    partition,
                    offset,
                    b"key-%d" % self._n,
                    b'{"n": %d}' % self._n,
                    (("n", str(self._n).encode()), ("trace-id", b"t")),
                    # Each record's Kafka timestamp, in milliseconds as Kafka keeps it.
                    self._stamped_from + self._n,
                )
            )
        return result

    def marker(self, partition: int) -> None:
        self.next[partition] += 1


class MemoryHarness:
    def __init__(self) -> None:
        self.topic = "t"
        self.fake = FakeStream(stable={(self.topic, 0): 0, (self.topic, 1): 0})
        self.stream: RecordStream = self.fake
        self._offsets = Counter(self.topic)

    def assign(self, starts: Mapping[TopicPartitionKey, int | None]) -> Listener:
        listener = Listener(starts)
        self.fake.assign([(self.topic, 0), (self.topic, 1)], listener)
        return listener

    def _write(self, partition: int, count: int) -> list[KafkaRecord]:
        records = self._offsets.records(partition, count)
        self.fake.logs.setdefault((self.topic, partition), []).extend(records)
        return records

    def _end(self, partition: int) -> None:
        self._offsets.marker(partition)
        self.fake.stable[(self.topic, partition)] = self._offsets.next[partition]

    def commit(self, partition: int, count: int) -> list[KafkaRecord]:
        records = self._write(partition, count)
        self._end(partition)
        return records

    def abort(self, partition: int, count: int) -> None:
        self._offsets.records(partition, count)  # never in the log a consumer reads
        self._end(partition)

    def open(self, partition: int, count: int) -> Callable[[], list[KafkaRecord]]:
        records = self._write(partition, count)

        def commit() -> list[KafkaRecord]:
            self._end(partition)
            return records

        return commit


class KafkaHarness:
    def __init__(
        self, kafka: KafkaSettings, make_topic: Callable[..., str], watermarks: Watermarks
    ) -> None:
        self.topic = make_topic("contract-stream", partitions=2)
        self._watermarks = watermarks
        self._offsets = Counter(self.topic)
        self.stream_adapter = KafkaRecordStream(kafka, f"contract-{uuid.uuid4().hex}")
        self.stream: RecordStream = self.stream_adapter
        self._producer = Producer(
            {
                "bootstrap.servers": kafka.bootstrap_servers,
                "transactional.id": f"contract-{uuid.uuid4().hex}",
                "linger.ms": 5,
            }
        )
        self._producer.init_transactions(TIMEOUT_S)

    def assign(self, starts: Mapping[TopicPartitionKey, int | None]) -> Listener:
        listener = Listener(starts)
        self.stream_adapter.assign([(self.topic, 0), (self.topic, 1)], listener)
        return listener

    def _write(self, partition: int, count: int) -> list[KafkaRecord]:
        records = self._offsets.records(partition, count)
        self._producer.begin_transaction()
        for r in records:
            self._producer.produce(
                self.topic,
                r.value,
                r.key,
                partition=partition,
                headers=list(r.headers),
                timestamp=r.timestamp_ms,
            )
        self._producer.flush(TIMEOUT_S)
        return records

    def _end(self, partition: int, commit: bool) -> None:
        if commit:
            self._producer.commit_transaction(TIMEOUT_S)
        else:
            self._producer.abort_transaction(TIMEOUT_S)
        self._offsets.marker(partition)
        end = self._offsets.next[partition]
        self._watermarks.wait_for(self.topic, partition, stable=end, high=end)

    def commit(self, partition: int, count: int) -> list[KafkaRecord]:
        records = self._write(partition, count)
        self._end(partition, commit=True)
        return records

    def abort(self, partition: int, count: int) -> None:
        self._write(partition, count)
        self._end(partition, commit=False)

    def open(self, partition: int, count: int) -> Callable[[], list[KafkaRecord]]:
        records = self._write(partition, count)
        self._watermarks.wait_for(
            self.topic, partition, stable=records[0].offset, high=records[-1].offset + 1
        )

        def commit() -> list[KafkaRecord]:
            self._end(partition, commit=True)
            return records

        return commit

    def close(self) -> None:
        self.stream_adapter.close()
        self._producer.flush(TIMEOUT_S)


@pytest.fixture(params=memory_and("kafka"))
def kafka(request: pytest.FixtureRequest) -> Iterator[StreamHarness]:
    if request.param == "memory":
        yield MemoryHarness()
        return
    harness = KafkaHarness(
        request.getfixturevalue("kafka_settings"),
        request.getfixturevalue("make_topic"),
        request.getfixturevalue("watermarks"),
    )
    yield harness
    harness.close()


def read_to_end(
    stream: RecordStream, *ending: TopicPartitionKey
) -> dict[TopicPartitionKey, list[Event]]:
    """Poll until each partition of ``ending`` reported a PartitionEnd; every event, by
    partition (only the order within a partition is defined)."""
    events: dict[TopicPartitionKey, list[Event]] = {}
    waiting = set(ending)
    deadline = time.monotonic() + TIMEOUT_S
    while waiting:
        if time.monotonic() > deadline:
            raise AssertionError(f"no PartitionEnd of {sorted(waiting)} in {TIMEOUT_S:g} s")
        event = stream.poll(0.1)
        if event is None:
            continue
        tp = (event.topic, event.partition)
        events.setdefault(tp, []).append(event)
        if isinstance(event, PartitionEnd):
            waiting.discard(tp)
    return events


def test_empty_partitions_end_at_offset_zero(kafka: StreamHarness) -> None:
    p0, p1 = (kafka.topic, 0), (kafka.topic, 1)
    listener = kafka.assign({})
    assert listener.assigned_calls == [[p0, p1]]
    assert read_to_end(kafka.stream, p0, p1) == {
        p0: [PartitionEnd(kafka.topic, 0, 0)],
        p1: [PartitionEnd(kafka.topic, 1, 0)],
    }
    assert kafka.stream.last_stable_offsets([p0, p1]) == {p0: 0, p1: 0}
    assert kafka.stream.poll(0.2) is None


def test_records_come_in_offset_order_then_the_end_at_the_last_stable_offset(
    kafka: StreamHarness,
) -> None:
    p0, p1 = (kafka.topic, 0), (kafka.topic, 1)
    first = kafka.commit(0, 3)
    other = kafka.commit(1, 2)
    second = kafka.commit(0, 1)
    assert [r.offset for r in first + second] == [0, 1, 2, 4]  # 3: the commit marker
    assert kafka.stream.last_stable_offsets([p0, p1]) == {p0: 6, p1: 3}
    kafka.assign({})
    assert read_to_end(kafka.stream, p0, p1) == {
        p0: [*first, *second, PartitionEnd(kafka.topic, 0, 6)],
        p1: [*other, PartitionEnd(kafka.topic, 1, 3)],
    }
    # New records after the end: they, then the end again.
    third = kafka.commit(0, 2)
    assert read_to_end(kafka.stream, p0) == {p0: [*third, PartitionEnd(kafka.topic, 0, 9)]}


def test_assign_starts_each_partition_where_the_listener_says(kafka: StreamHarness) -> None:
    p0, p1 = (kafka.topic, 0), (kafka.topic, 1)
    records = kafka.commit(0, 3)
    other = kafka.commit(1, 2)
    kafka.assign({p0: 1, p1: None})
    assert read_to_end(kafka.stream, p0, p1) == {
        p0: [*records[1:], PartitionEnd(kafka.topic, 0, 4)],
        p1: [*other, PartitionEnd(kafka.topic, 1, 3)],
    }


def test_seek_resumes_the_partition_at_the_offset(kafka: StreamHarness) -> None:
    p0, p1 = (kafka.topic, 0), (kafka.topic, 1)
    records = kafka.commit(0, 4)
    kafka.assign({})
    read_to_end(kafka.stream, p0, p1)
    kafka.stream.seek(kafka.topic, 0, 2)
    assert read_to_end(kafka.stream, p0) == {p0: [*records[2:], PartitionEnd(kafka.topic, 0, 5)]}
    kafka.stream.seek(kafka.topic, 0, None)
    assert read_to_end(kafka.stream, p0) == {p0: [*records, PartitionEnd(kafka.topic, 0, 5)]}
    kafka.stream.seek(kafka.topic, 0, 5)  # at the end: only the end
    assert read_to_end(kafka.stream, p0) == {p0: [PartitionEnd(kafka.topic, 0, 5)]}


def test_a_seek_drops_what_was_fetched_before_it(kafka: StreamHarness) -> None:
    """Records fetched but not yet polled when the partition is sought elsewhere are not
    returned: the next record is the one at the offset sought (the core relies on it
    after a compare-and-set conflict)."""
    p0 = (kafka.topic, 0)
    records = kafka.commit(0, 10)
    kafka.assign({(kafka.topic, 1): 0})
    deadline = time.monotonic() + TIMEOUT_S
    returned: list[KafkaRecord] = []
    while len(returned) < 2:  # the first two: the rest is fetched by then
        if time.monotonic() > deadline:
            raise AssertionError("no records of partition 0")
        event = kafka.stream.poll(0.1)
        if isinstance(event, KafkaRecord) and (event.topic, event.partition) == p0:
            returned.append(event)
    assert returned == records[:2]
    kafka.stream.seek(kafka.topic, 0, 5)
    assert read_to_end(kafka.stream, p0)[p0] == [*records[5:], PartitionEnd(kafka.topic, 0, 11)]
    kafka.stream.seek(kafka.topic, 0, 1)  # back: what was returned comes again
    assert read_to_end(kafka.stream, p0)[p0] == [*records[1:], PartitionEnd(kafka.topic, 0, 11)]


def test_records_of_aborted_transactions_are_never_returned(kafka: StreamHarness) -> None:
    p0, p1 = (kafka.topic, 0), (kafka.topic, 1)
    before = kafka.commit(0, 2)  # 0-1, marker 2
    kafka.abort(0, 2)  # 3-4, marker 5
    after = kafka.commit(0, 1)  # 6, marker 7
    assert kafka.stream.last_stable_offsets([p0]) == {p0: 8}
    kafka.assign({})
    assert read_to_end(kafka.stream, p0, p1) == {
        p0: [*before, *after, PartitionEnd(kafka.topic, 0, 8)],
        p1: [PartitionEnd(kafka.topic, 1, 0)],
    }
    kafka.stream.seek(kafka.topic, 0, 3)  # into the aborted transaction
    assert read_to_end(kafka.stream, p0) == {p0: [*after, PartitionEnd(kafka.topic, 0, 8)]}


def test_the_end_moves_past_an_aborted_transaction_alone(kafka: StreamHarness) -> None:
    p0, p1 = (kafka.topic, 0), (kafka.topic, 1)
    records = kafka.commit(0, 1)
    kafka.assign({})
    assert read_to_end(kafka.stream, p0, p1) == {
        p0: [*records, PartitionEnd(kafka.topic, 0, 2)],
        p1: [PartitionEnd(kafka.topic, 1, 0)],
    }
    kafka.abort(0, 2)  # 2-3, marker 4: no record to return, but a new end
    assert read_to_end(kafka.stream, p0) == {p0: [PartitionEnd(kafka.topic, 0, 5)]}


def test_an_open_transaction_holds_the_end_at_its_first_offset(kafka: StreamHarness) -> None:
    p0, p1 = (kafka.topic, 0), (kafka.topic, 1)
    committed = kafka.commit(0, 2)  # 0-1, marker 2
    commit_open = kafka.open(0, 2)  # 3-4, still open
    assert kafka.stream.last_stable_offsets([p0]) == {p0: 3}
    kafka.assign({})
    assert read_to_end(kafka.stream, p0, p1) == {
        p0: [*committed, PartitionEnd(kafka.topic, 0, 3)],
        p1: [PartitionEnd(kafka.topic, 1, 0)],
    }
    opened = commit_open()  # marker 5
    assert [r.offset for r in opened] == [3, 4]
    assert kafka.stream.last_stable_offsets([p0]) == {p0: 6}
    assert read_to_end(kafka.stream, p0) == {p0: [*opened, PartitionEnd(kafka.topic, 0, 6)]}


def test_reading_past_the_end_of_the_log_is_an_error(kafka: StreamHarness) -> None:
    p0, p1 = (kafka.topic, 0), (kafka.topic, 1)
    kafka.commit(0, 2)  # 0-1, marker 2: the log ends at 3
    kafka.assign({})
    read_to_end(kafka.stream, p0, p1)
    kafka.stream.seek(kafka.topic, 0, 10)
    with pytest.raises(KafkaError):
        read_to_end(kafka.stream, p0)
