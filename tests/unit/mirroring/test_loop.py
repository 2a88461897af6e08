"""The mirror's consume loop over in-memory ports: batching, targets, offsets past
markers, conflicts (zombies), revocation and retries. Every test runs twice: batches
applied inline, and on the apply lane's own thread while the loop goes on (overlap)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from relay.errors import GaveUpError, MirrorOffsetConflict
from relay.mirroring.applier import Applier
from relay.mirroring.loop import MirrorLoop
from relay.mirroring.types import (
    Batch,
    Delete,
    KafkaRecord,
    PartitionEnd,
    TopicPartitionKey,
    Upsert,
)
from relay.runtime.retry import RetryPolicy
from tests.fakes.mirroring import (
    FakeStream,
    FetchedStream,
    MemoryStore,
    fetched_in_rounds,
    items_table,
    logs_of,
    names,
    record,
)
from tests.unit.mirroring.loop_support import OVERLAP, FakeClock, make_loop, run_once

P0: TopicPartitionKey = ("t", 0)
P1: TopicPartitionKey = ("t", 1)


@pytest.fixture(autouse=True, params=[False, True], ids=["inline", "overlapped"])
def _lane(request: pytest.FixtureRequest) -> None:
    OVERLAP[0] = request.param


def test_once_applies_up_to_the_last_stable_offsets_and_stores_offsets_past_markers() -> None:
    # Partition 0: a committed transaction (0-2, marker 3), an aborted one (4-5, abort
    # marker 6) the consumer never shows; partition 1: two records and a marker.
    stream = FakeStream(
        logs_of([record(0, 1, "a"), record(1, 2, "b"), record(2, 1, "c")])
        | logs_of([record(0, 3, "x", 1), record(1, 4, "y", 1)]),
        stable={P0: 7, P1: 3},
    )
    store = MemoryStore()
    loop = run_once(store, stream)
    assert store.offsets == {P0: 7, P1: 3}
    assert names(store) == {1: "c", 2: "b", 3: "x", 4: "y"}
    summary = loop.summary()
    assert (
        summary.total("applied"),
        summary.total("dead_lettered"),
        summary.total("conflicts"),
    ) == (5, 0, 0)


def test_records_past_the_target_are_left_for_the_next_run() -> None:
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(10)]), stable={P0: 10})
    store = MemoryStore()
    loop = make_loop(store, {P0: 6})
    stream.assign([P0], loop)
    loop.run(stream)
    assert store.offsets == {P0: 6}
    assert [offset for _, _, offset in store.applied] == [0, 1, 2, 3, 4, 5]


def test_a_partition_with_only_aborted_records_still_advances_its_offset() -> None:
    stream = FakeStream({P0: []}, stable={P0: 4})  # aborted records 0-2, abort marker 3
    store = MemoryStore(offsets={P0: 0})
    run_once(store, stream)
    assert store.offsets == {P0: 4}
    assert store.applied == []


def test_nothing_committed_yet_stores_nothing() -> None:
    stream = FakeStream({P0: []}, stable={P0: 0})
    store = MemoryStore()
    run_once(store, stream)
    assert store.offsets == {}


def test_starts_from_the_stored_offset() -> None:
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(8)]), stable={P0: 8})
    store = MemoryStore(offsets={P0: 5})
    run_once(store, stream)
    assert [offset for _, _, offset in store.applied] == [5, 6, 7]


def test_batches_hold_at_most_batch_size_records() -> None:
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(10)]), stable={P0: 11})
    store = MemoryStore()
    sizes: list[int] = []
    store.before_apply = lambda batch: sizes.append(len(batch.items))
    run_once(store, stream, batch_size=3)
    assert sizes == [3, 3, 3, 1]
    assert store.offsets == {P0: 11}


def test_a_zombie_batch_is_rolled_back_and_the_partition_continues_from_the_stored_offset() -> None:
    """Another consumer applied offsets 0-1 after this one fetched 0-3: the batch's
    compare-and-set fails, nothing is applied twice, and reading goes back to offset 2
    (continuing at 4 would skip two records)."""
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(8)]), stable={P0: 8})
    store = MemoryStore()

    def other_consumer_wins(batch: Batch) -> None:
        if not store.offsets:
            store.offsets[P0] = 2
            store.applied.extend(("t", 0, n) for n in range(2))

    store.before_apply = other_consumer_wins
    loop = run_once(store, stream, batch_size=4)
    assert sorted(offset for _, _, offset in store.applied) == list(range(8))
    assert stream.seeks == [(P0, 2)]
    assert store.offsets == {P0: 8}
    assert loop.summary().total("conflicts") == 1


def test_revoked_partitions_drop_their_fetched_records() -> None:
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(6)]), stable={P0: 6})
    store = MemoryStore()
    loop = make_loop(store, None, batch_size=100)
    stop = threading.Event()
    polls = 0

    def revoke_after_three(s: FakeStream) -> None:
        nonlocal polls
        polls += 1
        if polls == 4:
            s.revoke([P0])
        if polls > 6:
            stop.set()

    stream.on_poll = revoke_after_three
    stream.assign([P0], loop)
    loop.run(stream, stop)
    assert store.applied == []
    assert store.offsets == {}


def test_stopping_applies_what_is_fetched() -> None:
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(5)]), stable={P0: 5})
    store = MemoryStore()
    loop = make_loop(store, None)
    stop = threading.Event()
    polls = 0

    def stop_at_the_third(_s: FakeStream) -> None:
        nonlocal polls
        polls += 1
        if polls == 3:
            stop.set()  # this poll still returns its record

    stream.on_poll = stop_at_the_third
    stream.assign([P0], loop)
    loop.run(stream, stop)
    assert [offset for _, _, offset in store.applied] == [0, 1, 2]
    assert store.offsets == {P0: 3}


def test_transient_errors_are_retried_with_the_same_batch() -> None:
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(3)]), stable={P0: 3})
    store = MemoryStore(fail_next=2)
    run_once(store, stream)
    assert [offset for _, _, offset in store.applied] == [0, 1, 2]


def test_gives_up_when_the_retry_policy_does() -> None:
    stream = FakeStream(logs_of([record(0, 1, "a")]), stable={P0: 1})
    store = MemoryStore(fail_next=100)
    loop = make_loop(store, {P0: 1}, retry=RetryPolicy(initial_delay_s=0.01, max_attempts=3))
    stream.assign([P0], loop)
    with pytest.raises(GaveUpError, match="failed 3 times: connection lost"):
        loop.run(stream)
    assert store.offsets == {}


def test_dead_letters_and_tombstones_in_one_batch() -> None:
    stream = FakeStream(
        logs_of([record(0, 1, "a"), record(1, None, "no key"), record(2, 1, None)]),
        stable={P0: 3},
    )
    store = MemoryStore()
    loop = run_once(store, stream)
    assert names(store) == {}  # created, then deleted by the tombstone
    assert [d.error for d in store.dead] == ["items: record has no key"]
    assert (loop.summary().total("applied"), loop.summary().total("dead_lettered")) == (2, 1)
    assert store.offsets == {P0: 3}


def test_conflict_error_carries_the_partition() -> None:
    error = MirrorOffsetConflict("moved", "t", 3, 17)
    assert (error.topic, error.partition, error.expected, error.exit_code) == ("t", 3, 17, 5)


def test_a_record_that_may_heal_is_tried_again_and_applies_once_it_can() -> None:
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(3)]), stable={P0: 3})
    tries: list[int] = []

    def parent_arrives_on_the_third_try(op: Upsert | Delete) -> str | None:
        if not isinstance(op, Upsert) or op.row["id"] != 1:
            return None
        tries.append(1)
        return "foreign key: no parent yet" if len(tries) < 3 else None

    store = MemoryStore(refuses_for_now=parent_arrives_on_the_third_try)
    loop = make_loop(store, {P0: 3})
    stream.assign([P0], loop)
    loop.run(stream)
    assert [offset for _, _, offset in store.applied] == [0, 1, 2]
    assert store.dead == []


def test_a_record_that_never_heals_is_dead_lettered_after_its_retries() -> None:
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(3)]), stable={P0: 3})
    store = MemoryStore(
        refuses_for_now=lambda op: (
            "no parent" if isinstance(op, Upsert) and op.row["id"] == 1 else None
        )
    )
    loop = MirrorLoop(
        Applier([items_table()], store),
        store,
        targets={P0: 3},
        retry=RetryPolicy(initial_delay_s=0.01),
        clock=FakeClock(),
        record_retries=4,
        overlap=OVERLAP[0],
    )
    stream.assign([P0], loop)
    loop.run(stream)
    assert [d.error for d in store.dead] == [
        "database rejected the record: no parent (after 4 attempts)"
    ]
    assert [offset for _, _, offset in store.applied] == [0, 2]
    assert store.offsets == {P0: 3}


def test_stopping_while_a_record_may_heal_leaves_the_batch_unapplied() -> None:
    """The stop event given to run() also ends the wait for a record that may heal: the
    batch is neither applied nor dead-lettered, its offset not stored."""
    stream = FakeStream(logs_of([record(n, n, f"n{n}") for n in range(3)]), stable={P0: 3})
    stop = threading.Event()

    def no_parent_and_stopping(op: Upsert | Delete) -> str | None:
        if not isinstance(op, Upsert) or op.row["id"] != 1:
            return None
        stop.set()
        return "foreign key: no parent yet"

    store = MemoryStore(refuses_for_now=no_parent_and_stopping)
    loop = make_loop(store, None)
    stream.assign([P0], loop)
    loop.run(stream, stop)
    assert (store.applied, store.dead, store.offsets) == ([], [], {})


def test_partition_ends_already_overtaken_do_not_cut_batches() -> None:
    """A continuous mirror that fell behind finds records and the partition ends reported
    after each fetch queued together: everything fetched is applied in one batch per
    partition, not in one batch per stale partition end (which kept it behind)."""
    store = MemoryStore()
    batches: list[tuple[TopicPartitionKey, int]] = []
    store.before_apply = lambda batch: batches.append(
        ((batch.topic, batch.partition), len(batch.items))
    )
    stream = FetchedStream(fetched_in_rounds(rounds=5, partitions=2))
    loop = make_loop(store, None)
    stream.assign([P0, P1], loop)
    loop.run(stream, stream.stop)
    assert sorted(batches) == [(P0, 5), (P1, 5)]
    assert store.offsets == {P0: 5, P1: 5}


def test_a_continuous_mirror_applies_what_it_has_fetched_without_waiting_for_a_partition_end() -> (
    None
):
    """Under a steady stream of transactions a partition's last stable offset rarely
    reaches its high watermark, so the consumer seldom reports an end: once everything
    fetched is taken, the partitions with records are applied, not held for
    ``max_wait_s``."""
    store = MemoryStore()
    batches: list[tuple[TopicPartitionKey, int]] = []
    store.before_apply = lambda batch: batches.append(
        ((batch.topic, batch.partition), len(batch.items))
    )
    fetches: list[KafkaRecord | PartitionEnd | None] = []
    for fetch in range(3):
        fetches += [record(2 * fetch + i, 2 * fetch + i, f"n{fetch}{i}") for i in (0, 1)]
        fetches.append(None)
    stream = FetchedStream(fetches)
    loop = make_loop(store, None)
    stream.assign([P0], loop)
    loop.run(stream, stream.stop)
    assert batches == [(P0, 2), (P0, 2), (P0, 2)]


def test_a_skipped_tombstone_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    filtered = items_table()
    filtered = replace(
        filtered, mapping=replace(filtered.mapping, event_types=frozenset({"ItemSaved"}))
    )
    saved = ("event-type", b"ItemSaved")
    archived = replace(record(2, 1, None), headers=(("event-type", b"ItemArchived"),))
    stream = FakeStream(
        logs_of(
            [
                replace(record(0, 1, "a"), headers=(saved,)),
                replace(record(1, 2, "b"), headers=(saved,)),
                archived,  # skipped: its event type is not listed
                record(3, 2, None),  # no event type: deletes
            ]
        ),
        stable={P0: 4},
    )
    store = MemoryStore()
    loop = MirrorLoop(
        Applier([filtered], store), store, targets={P0: 4}, clock=FakeClock(), overlap=OVERLAP[0]
    )
    stream.assign([P0], loop)
    with caplog.at_level("WARNING"):
        summary = loop.run(stream)
    assert names(store) == {1: "a"}
    assert (summary.total("skipped"), summary.total("skipped_tombstones")) == (1, 1)
    assert (
        "t[0]: 1 tombstone skipped (offset 2: event type 'ItemArchived' is not listed for items)"
        in caplog.text
    )


def _reading_past(records: int, offset: int) -> tuple[FakeStream, threading.Event]:
    """An overlapped-lane test's stream of ``records`` records, and an event set once the
    loop polls for the record at ``offset``."""
    if not OVERLAP[0]:
        pytest.skip("the overlapped lane only")
    stream = FakeStream(
        logs_of([record(n, n, f"n{n}") for n in range(records)]), stable={P0: records}
    )
    read = threading.Event()
    stream.on_poll = lambda s: read.set() if s.positions.get(P0, 0) >= offset else None
    return stream, read


def test_with_overlap_the_next_batch_is_read_while_the_last_one_is_applied() -> None:
    """The first batch's apply waits until the loop reads the record that fills the
    second one: applied in the loop's own thread, it would wait in vain."""
    stream, second_read = _reading_past(6, 5)
    store = MemoryStore()
    waited: list[bool] = []

    def wait_for_the_second(batch: Batch) -> None:
        if batch.expected is None:
            waited.append(second_read.wait(5.0))

    store.before_apply = wait_for_the_second
    run_once(store, stream, batch_size=3)
    assert waited == [True]
    assert store.offsets == {P0: 6}
    assert [offset for _, _, offset in store.applied] == [0, 1, 2, 3, 4, 5]


def test_with_overlap_a_batch_read_behind_a_zombie_batch_is_dropped_not_applied() -> None:
    """The second batch is decoded from the offset the first one would store; the first
    one's compare-and-set fails (another consumer applied offsets 0-1 meanwhile): the
    second is dropped, never handed to the database, and reading goes back to offset 2."""
    stream, second_read = _reading_past(8, 7)
    store = MemoryStore()
    starts: list[int | None] = []

    def other_consumer_wins(batch: Batch) -> None:
        starts.append(batch.expected)
        if not store.offsets and second_read.wait(5.0):
            store.offsets[P0] = 2
            store.applied.extend(("t", 0, n) for n in range(2))

    store.before_apply = other_consumer_wins
    loop = run_once(store, stream, batch_size=4)
    assert starts == [None, 2, 6]
    assert stream.seeks == [(P0, 2)]
    assert sorted(offset for _, _, offset in store.applied) == list(range(8))
    assert loop.summary().total("conflicts") == 1
