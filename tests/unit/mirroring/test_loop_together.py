"""The consume loop applies the batches of partitions that are ready at once in one
transaction (``MirrorStore.apply_together``), and one at a time when the store refuses
them together: an offset that moved (a zombie's batch) or a refused record."""

from __future__ import annotations

import pytest

from relay.mirroring.types import Batch, Op, TopicPartitionKey, Upsert
from tests.fakes.mirroring import FakeStream, MemoryStore, logs_of, names, record
from tests.unit.mirroring.loop_support import OVERLAP, run_once

P0: TopicPartitionKey = ("t", 0)
P1: TopicPartitionKey = ("t", 1)


@pytest.fixture(autouse=True, params=[False, True], ids=["inline", "overlapped"])
def _lane(request: pytest.FixtureRequest) -> None:
    OVERLAP[0] = request.param


def _two_partitions() -> FakeStream:
    return FakeStream(
        logs_of([record(n, n, f"a{n}") for n in range(4)])
        | logs_of([record(n, 10 + n, f"b{n}", 1) for n in range(3)]),
        stable={P0: 4, P1: 3},
    )


def test_partitions_read_up_to_their_end_at_once_are_applied_in_one_transaction() -> None:
    store = MemoryStore()
    loop = run_once(store, _two_partitions())
    assert store.together == [(P0, P1)]
    assert store.offsets == {P0: 4, P1: 3}
    assert names(store) == {0: "a0", 1: "a1", 2: "a2", 3: "a3", 10: "b0", 11: "b1", 12: "b2"}
    assert loop.summary().total("applied") == 7


def test_an_offset_moved_under_one_partition_leaves_the_other_applied_and_resyncs_it() -> None:
    """Another consumer applied partition 0's offsets 0-1 after this one fetched them: the
    transaction of both partitions is refused; partition 1 is applied alone, partition 0
    goes back to offset 2, and nothing is applied twice."""
    stream = _two_partitions()
    store = MemoryStore()

    def other_consumer_wins(batch: Batch) -> None:
        if P0 not in store.offsets:
            store.offsets[P0] = 2
            store.applied.extend(("t", 0, n) for n in range(2))

    store.before_apply = other_consumer_wins
    loop = run_once(store, stream)
    assert sorted(store.applied) == [("t", 0, n) for n in range(4)] + [
        ("t", 1, n) for n in range(3)
    ]
    assert stream.seeks == [(P0, 2)]
    assert store.offsets == {P0: 4, P1: 3}
    assert loop.summary().total("conflicts") == 1


def test_a_refused_record_has_the_batches_applied_one_at_a_time() -> None:
    """The database refuses one record: the batches of both partitions are applied one
    at a time, that record dead-lettered alone."""

    def refuses_b1(op: Op) -> str | None:
        return "refused" if isinstance(op, Upsert) and op.row.get("name") == "b1" else None

    store = MemoryStore(rejects=refuses_b1)
    loop = run_once(store, _two_partitions())
    assert store.together == [(P0, P1)]
    assert [(d.record.partition, d.record.offset) for d in store.dead] == [(1, 1)]
    assert names(store) == {0: "a0", 1: "a1", 2: "a2", 3: "a3", 10: "b0", 12: "b2"}
    assert store.offsets == {P0: 4, P1: 3}
    assert loop.summary().total("dead_lettered") == 1
