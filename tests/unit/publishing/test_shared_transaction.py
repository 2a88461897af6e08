"""How the relay partitions' threads of one process share a transaction (the Kafka calls
replaced by a recorder of what is opened and ended)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from relay.publishing.shared_transaction import SharedTransaction


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def opening(self) -> None:
        self.calls.append("open")

    def ending(self, number: int, positions: Mapping[int, int | None], doomed: str | None) -> None:
        self.calls.append(
            f"abort {number}" if doomed else f"commit {number} {dict(sorted(positions.items()))}"
        )


def _shared(recorder: _Recorder) -> SharedTransaction[int]:
    return SharedTransaction(opening=recorder.opening, ending=recorder.ending, wait_s=30)


def _finishing(shared: SharedTransaction[int], partition: int, position: int) -> threading.Thread:
    thread = threading.Thread(target=shared.finish, args=(partition, position))
    thread.start()
    return thread


def test_the_partitions_of_a_cycle_share_one_transaction() -> None:
    recorder = _Recorder()
    shared = _shared(recorder)
    outcomes: list[Exception | None] = []

    def partition(p: int, joined: threading.Barrier) -> None:
        shared.begin(p)
        joined.wait()
        outcomes.append(shared.finish(p, 10 + p))

    joined = threading.Barrier(3)
    threads = [threading.Thread(target=partition, args=(p, joined)) for p in (0, 1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert outcomes == [None, None, None]
    assert recorder.calls == ["open", "commit 1 {0: 10, 1: 11, 2: 12}"]


def test_a_partition_that_wakes_after_later_transactions_still_gets_its_outcome() -> None:
    """Partition 0 waits for transaction 1; partition 1 ends it, then runs transactions
    2 and 3 alone before partition 0's thread is scheduled again."""
    shared = _shared(_Recorder())
    shared.begin(0)
    shared.begin(1)
    outcome: list[Exception | None] = []
    waiting = threading.Thread(target=lambda: outcome.append(shared.finish(0, 5)))
    with shared._cond:  # partition 0's thread cannot wake until this block ends
        waiting.start()
        shared._cond.wait(0.2)  # lets it hand in and wait
        assert shared.finish(1, 5) is None
        for position in (6, 7):
            shared.begin(1)
            assert shared.finish(1, position) is None
    waiting.join(5)
    assert not waiting.is_alive(), "partition 0 never learnt its transaction's outcome"
    assert outcome == [None]


def _one_handed_in_one_reading(
    recorder: _Recorder,
) -> tuple[SharedTransaction[int], threading.Thread]:
    """Partition 0 joined and hands in (on a thread of its own) while partition 1, which
    announced its batch, still reads its rows."""
    shared = _shared(recorder)
    shared.prepare(0)
    shared.begin(0)
    shared.prepare(1)
    return shared, _finishing(shared, 0, 5)


def test_a_transaction_waits_for_a_partition_still_reading_its_rows() -> None:
    """Partition 1 announced its batch (it is reading its rows) before partition 0, alone
    in the open transaction, handed in: the transaction waits for partition 1 instead of
    committing without it, so partition 1's rows do not wait for a commit of their own."""
    recorder = _Recorder()
    shared, first = _one_handed_in_one_reading(recorder)
    first.join(0.5)
    assert first.is_alive(), "the transaction ended without the partition reading its rows"
    shared.begin(1)
    assert shared.finish(1, 7) is None
    first.join(5)
    assert recorder.calls == ["open", "commit 1 {0: 5, 1: 7}"]


def test_a_partition_that_found_nothing_withdraws_and_the_transaction_ends() -> None:
    recorder = _Recorder()
    shared, first = _one_handed_in_one_reading(recorder)
    shared.withdraw(1)
    first.join(5)
    assert not first.is_alive()
    assert recorder.calls == ["open", "commit 1 {0: 5}"]


def test_a_partition_that_failed_its_part_aborts_the_transaction_for_all() -> None:
    recorder = _Recorder()
    shared = _shared(recorder)
    shared.begin(0)
    shared.begin(1)
    first = _finishing(shared, 0, 5)
    assert shared.finish(1, None) is None  # the recorder's ending returns no error
    first.join(5)
    assert recorder.calls == ["open", "abort 1"]


def test_partitions_announce_their_next_batches_while_the_transaction_ends() -> None:
    """``ending`` (the brokers' commit) runs without the lock: a partition announces its
    next batch meanwhile (the next transaction waits for it), and waits for the end
    before it reads its rows."""
    committing, release = threading.Event(), threading.Event()
    recorder = _Recorder()

    def slow_ending(number: int, positions: Mapping[int, int | None], doomed: str | None) -> None:
        committing.set()
        release.wait(10)
        recorder.ending(number, positions, doomed)

    shared: SharedTransaction[int] = SharedTransaction(
        opening=recorder.opening, ending=slow_ending, wait_s=30
    )
    shared.begin(0)
    ending = _finishing(shared, 0, 5)
    assert committing.wait(5)
    announcing = threading.Thread(target=shared.prepare, args=(1,))
    try:
        announcing.start()
        withdrawn = threading.Thread(target=shared.withdraw, args=(7,))
        withdrawn.start()
        withdrawn.join(5)
        assert not withdrawn.is_alive(), "the lock was held while the transaction ended"
        assert announcing.is_alive(), "a partition read its rows before the commit ended"
    finally:
        release.set()
    announcing.join(5)
    ending.join(5)
    shared.begin(0)
    second = _finishing(shared, 0, 6)
    second.join(0.5)
    assert second.is_alive(), "the next transaction ended without the announced partition"
    shared.withdraw(1)
    second.join(5)
    assert recorder.calls == ["open", "commit 1 {0: 5}", "open", "commit 2 {0: 6}"]


def test_a_partition_that_begins_again_with_its_part_unfinished_aborts_that_transaction() -> None:
    """Partition 1 joined, sent (say) and never handed in: a send in doubt, a transaction
    that timed out. When it begins again, with its position read again, what it sent the
    first time must not commit beside what it sends now: that transaction aborts, and the
    retry goes into the next one."""
    recorder = _Recorder()
    shared = _shared(recorder)
    shared.begin(0)
    shared.begin(1)
    again = threading.Thread(target=shared.begin, args=(1,))
    again.start()
    first = _finishing(shared, 0, 5)
    first.join(5)
    again.join(5)
    assert not again.is_alive()
    assert shared.finish(1, 7) is None
    assert recorder.calls == ["open", "abort 1", "open", "commit 2 {1: 7}"]
