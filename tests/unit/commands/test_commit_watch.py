"""CommitWatch wakes exactly the partitions whose committed marker moved."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from relay.commands.commit_watch import CommitWatch
from relay.errors import RetriableError


class Tops:
    def __init__(self) -> None:
        self.now: dict[int, int] = {0: 0, 1: 0, 2: 0}
        self.asked: list[list[int]] = []

    def __call__(self, partitions: Sequence[int]) -> Mapping[int, int]:
        self.asked.append(list(partitions))
        return {p: self.now[p] for p in partitions}


def test_only_partitions_whose_marker_moved_are_woken() -> None:
    tops = Tops()
    watch = CommitWatch([0, 1, 2], tops, interval_s=0.01)
    assert watch.check() == []
    tops.now[1] = 7
    assert watch.check() == [1]
    assert watch.check() == []  # seen
    tops.now[1] = 0  # published and cleaned up
    tops.now[2] = 3
    assert watch.check() == [2]
    tops.now[1] = 9
    assert watch.check() == [1]
    assert tops.asked[-1] == [0, 1, 2]


def test_a_wake_up_is_kept_until_taken_and_wakes_a_waiting_partition() -> None:
    tops = Tops()
    watch = CommitWatch([0, 1, 2], tops, interval_s=0.01)
    tops.now[0] = 1
    watch.check()
    assert watch.wait(0, timeout=60)  # the wake-up came before the call: it is not lost
    assert not watch.wait(0, timeout=0)  # consumed
    assert not watch.wait(1, timeout=0)  # never woken
    tops.now[1] = 4
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(watch.wait(1, timeout=60)))
    waiter.start()
    watch.check()
    waiter.join(30)
    assert woken == [True]


def test_run_checks_until_stopped_survives_database_errors_and_wakes_everyone() -> None:
    stop = threading.Event()
    calls = 0

    def flaky(partitions: Sequence[int]) -> Mapping[int, int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RetriableError("database restarting")
        if calls == 3:
            stop.set()
        return {p: calls for p in partitions}

    watch = CommitWatch([0, 1], flaky, interval_s=0.001)
    watch.run(stop)
    assert calls == 3
    assert all(watch.wait(partition, timeout=0) for partition in (0, 1))  # woken on stop


def test_a_partition_has_rows_pending_only_above_what_the_last_check_saw() -> None:
    """A partition that published up to the top its last check saw waits for a wake-up
    instead of reading the outbox again for nothing (and, in its process's shared
    transaction, keeping the others waiting while it reads)."""
    tops = Tops()
    watch = CommitWatch([0, 1, 2], tops, interval_s=0.01)
    assert watch.pending(0, 0)  # not checked yet: read to find out
    watch.check()
    assert not watch.pending(0, 0)
    tops.now[0] = 12
    watch.check()
    assert watch.pending(0, 5)
    assert not watch.pending(0, 12)  # published up to the top
    tops.now[0] = 0  # published and cleaned up
    watch.check()
    assert not watch.pending(0, 12)
