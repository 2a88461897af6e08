"""Which relay partitions a sharing `relay run` process runs (relay.commands.shared_run)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest

from relay.commands.shared_run import CountWatch, PartitionWorkers
from relay.devenv.waiting import wait_until
from relay.errors import DatabaseError, ProducerFencedError
from relay.publishing.types import DrainResult
from tests.fakes.publishing import FakeClock


class Partitions:
    """Partition bodies that run until stopped, or fail as told."""

    def __init__(self) -> None:
        self.started: Counter[int] = Counter()
        self.running: dict[int, threading.Event] = {}
        self.fail: dict[int, Exception] = {}
        self.released: list[int] = []

    def run(self, partition: int, stop: threading.Event) -> DrainResult:
        self.started[partition] += 1
        if (error := self.fail.pop(partition, None)) is not None:
            raise error
        self.running[partition] = stop
        stop.wait()
        return DrainResult(partition, 0, 0, 0)


def workers_for(parts: Partitions, clock: FakeClock) -> PartitionWorkers:
    return PartitionWorkers(
        parts.run,
        clock=clock,
        retake_after_s=20,
        stop_within_s=10,
        released=parts.released.append,
        wake=lambda: None,
    )


def test_assigned_partitions_run_until_revoked_and_are_released() -> None:
    parts, clock = Partitions(), FakeClock()
    workers = workers_for(parts, clock)
    workers.assigned([0, 1, 2])
    workers.revoked([1])  # returns once partition 1's worker has finished
    assert parts.released == [1]
    assert [r.partition for r in workers.results] == [1]
    workers.stop_all()
    assert sorted(r.partition for r in workers.results) == [0, 1, 2]
    assert dict(parts.started) == {0: 1, 1: 1, 2: 1}


def test_a_fenced_partition_is_released_alone_and_taken_back_only_if_still_assigned() -> None:
    parts, clock = Partitions(), FakeClock()
    parts.fail = {1: ProducerFencedError("fenced"), 2: ProducerFencedError("fenced")}
    workers = workers_for(parts, clock)
    workers.assigned([0, 1, 2])
    wait_until(
        lambda: parts.released.count(1) == 1 and parts.released.count(2) == 1, 10, "the workers"
    )
    workers.revoked([2])  # the group gave partition 2 to another member meanwhile
    clock.now += 19
    workers.check()
    assert dict(parts.started) == {0: 1, 1: 1, 2: 1}  # too early to take 1 back
    clock.now += 1
    workers.check()
    wait_until(lambda: parts.started[1] == 2, 10, "the workers")
    assert parts.started[2] == 1  # not assigned here any more
    assert 0 in parts.running and not parts.running[0].is_set()  # the others went on
    workers.stop_all()


def test_any_other_error_of_a_worker_stops_the_process() -> None:
    parts, clock = Partitions(), FakeClock()
    parts.fail = {3: DatabaseError("the database refused")}
    workers = workers_for(parts, clock)
    workers.assigned([3])
    with pytest.raises(DatabaseError, match="refused"):
        wait_until(lambda: _raises(workers.check), 10, "the workers")
        workers.check()


def _raises(check: Callable[[], None]) -> bool:
    try:
        check()
    except Exception:
        return True
    return False


def test_the_count_watch_asks_every_few_seconds_and_survives_a_failed_read() -> None:
    clock, counts = FakeClock(), [4, 4]

    def counted() -> int:
        if not counts:
            raise DatabaseError("the database went away")
        return counts.pop(0)

    watch = CountWatch(counted, 4, clock, every_s=5)
    assert not watch() and counts == [4, 4]  # too early to ask
    clock.now += 5
    assert not watch() and counts == [4]
    counts[0] = 8
    clock.now += 5
    assert watch()
    clock.now += 5
    assert not watch()  # a failed read is no change


def test_a_partition_taken_back_waits_for_its_worker_that_has_not_finished() -> None:
    """A worker that outlives its revocation (its batch's transaction has not ended yet)
    still publishes the relay partition here: taken back, the partition gets its new
    worker only once the old one has ended. Two at once read the same position and, in
    the process's shared transaction, committed the same rows twice."""
    release = threading.Event()
    started: list[threading.Event] = [threading.Event(), threading.Event()]
    active: Counter[int] = Counter()
    most: list[int] = []
    lock = threading.Lock()

    def run(partition: int, stop: threading.Event) -> DrainResult:
        with lock:
            first = not started[0].is_set()
            active[partition] += 1
            most.append(active[partition])
        started[0 if first else 1].set()
        try:
            (release if first else stop).wait(30)  # the first outlives its revocation
        finally:
            with lock:
                active[partition] -= 1
        return DrainResult(partition, 0, 0, 0)

    workers = PartitionWorkers(
        run,
        clock=FakeClock(),
        retake_after_s=20,
        stop_within_s=0.1,
        released=lambda _p: None,
        wake=lambda: None,
    )
    workers.assigned([0])
    assert started[0].wait(10)
    workers.revoked([0])  # gives up waiting for it after 0.1 s
    workers.assigned([0])
    try:
        assert not started[1].wait(0.5), "a second worker ran beside the first"
    finally:
        release.set()
    assert started[1].wait(10)
    workers.stop_all()
    assert max(most) == 1
