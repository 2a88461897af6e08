"""A batch's checks (both topics' ids, the position's owner) run while its copies are sent,
and a batch that fails them is aborted, never committed (relay.replication.batch_check)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from relay.errors import ReplicaPositionError
from relay.replication.batch_check import MAX_CHECK_THREADS, check_pool
from relay.replication.topic_ids import SharedTopicIds
from relay.replication.types import SourceRecord
from tests.fakes.replication import MemorySource, MemoryTarget, MemoryWriter, source_log
from tests.unit.replication.test_position_check import Ids, copied, grow, make


class SlowIds(Ids):
    """Topic ids whose source side answers only once the batch's copies are being sent."""

    def __init__(self, sending: threading.Event) -> None:
        super().__init__()
        self.sending = sending
        self.checking = False

    def source(self, topic: str, since: float) -> str | None:
        if self.checking:
            assert self.sending.wait(10), "the check waited for the copies that waited for it"
        return super().source(topic, since)


def sending_writer(writer: MemoryWriter, sending: threading.Event) -> None:
    send = writer.send

    def signalled(records: Sequence[SourceRecord]) -> None:
        sending.set()
        send(records)

    writer.send = signalled  # type: ignore[method-assign]


def test_the_checks_run_while_the_copies_are_sent() -> None:
    source, target, _ = copied()
    sending = threading.Event()
    ids = SlowIds(sending)
    replicator = make(source, target, ids)
    replicator.start()
    assert target.last_writer is not None
    sending_writer(target.last_writer, sending)
    grow(source, b"x", b"y")
    ids.checking = True
    batch = replicator.copy_batch()
    assert batch is not None and batch.records == 2
    assert [r.value for r in target.copies[-2:]] == [b"x", b"y"]
    replicator.close()


def test_a_batch_failing_its_checks_is_aborted_not_committed() -> None:
    source, target, ids = copied()
    replicator = make(source, target, ids)
    replicator.start()
    writer = target.last_writer
    assert writer is not None
    grow(source, b"x", b"y")
    ids.ids["orders"] = "S2"
    with pytest.raises(ReplicaPositionError, match="while it was copied"):
        replicator.copy_batch()
    assert (writer.aborts, writer.pending, len(target.copies)) == (1, None, 4)
    replicator.close()


class MeetingIds(Ids):
    """Topic ids whose source side answers only once the target side was asked too."""

    def __init__(self) -> None:
        super().__init__()
        self.target_asked = threading.Event()
        self.checking = False

    def source(self, topic: str, since: float) -> str | None:
        if self.checking:
            assert self.target_asked.wait(10), "the target was asked only after the source"
        return super().source(topic, since)

    def target(self, topic: str, since: float) -> str | None:
        self.target_asked.set()
        return super().target(topic, since)


def test_both_topics_are_described_at_once() -> None:
    source, target, _ = copied()
    ids = MeetingIds()
    replicator = make(source, target, ids)
    replicator.start()
    grow(source, b"x", b"y")
    ids.target_asked.clear()
    ids.checking = True
    batch = replicator.copy_batch()
    assert batch is not None and batch.records == 2
    replicator.close()


class ThreadNoting(Ids):
    """Topic ids that note the thread each description is asked on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def source(self, topic: str, since: float) -> str | None:
        self.threads.add(threading.current_thread().name)
        return super().source(topic, since)


def test_the_partitions_of_a_run_check_on_its_one_pool() -> None:
    pool = check_pool(2)
    try:
        ids = ThreadNoting()
        sides = [(MemorySource(source_log(b"a", b"b")), MemoryTarget()) for _ in range(2)]
        replicators = [make(source, target, ids, checks=pool) for source, target in sides]
        for replicator in replicators:
            replicator.start()
        ids.threads.clear()
        replicators[0].copy_batch()
        replicators[0].close()  # a partition released: the run's pool stays open
        batch = replicators[1].copy_batch()
        assert batch is not None and batch.records == 2
        assert ids.threads and all(name.startswith("check_") for name in ids.threads)
        replicators[1].close()
    finally:
        pool.shutdown()


def test_the_pool_is_sized_for_the_partitions_within_its_cap() -> None:
    assert [check_pool(n)._max_workers for n in (0, 1, 5)] == [3, 3, 15]
    assert check_pool(10_000)._max_workers == MAX_CHECK_THREADS


def test_partitions_share_fewer_threads_than_their_checks_without_waiting_on_each_other() -> None:
    """Eight partitions, three checks a batch each, on two threads: the checks of a batch
    that wait for a description under way wait for a thread already running it, never for
    a check still queued behind them (relay.replication.batch_check)."""
    pool = ThreadPoolExecutor(2, thread_name_prefix="check")
    ids = SharedTopicIds(
        lambda topics: {t: "S1" for t in topics}, lambda topics: {t: "T1" for t in topics}
    )
    sides = [(MemorySource(source_log(b"a", b"b", b"c")), MemoryTarget()) for _ in range(8)]
    replicators = [make(source, target, ids, checks=pool) for source, target in sides]
    try:
        with ThreadPoolExecutor(len(replicators)) as partitions:
            copied = list(partitions.map(lambda r: r.drain(3), replicators, timeout=30))
        assert [result.records for result in copied] == [3] * len(replicators)
    finally:
        for replicator in replicators:
            replicator.close()
        pool.shutdown()
