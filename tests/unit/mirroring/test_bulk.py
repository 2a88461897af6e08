"""A batch's operations on a current-state table split into rounds (pure): applied round
by round as the bulk statements apply them (each round's deletes, then its upserts; the
hot keys record by record), every possible stored row must end as applying the
operations record by record leaves it, including whether it was replaced by a new row
(whose unmapped columns take their defaults) or updated in place."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

import pytest

from relay.mirroring.bulk import Rounds, split_rounds
from relay.mirroring.types import Append, Delete, Op, Upsert

KEY = ("id",)


def up(version: int, tag: str, key: object = 1) -> Upsert:
    return Upsert("t", {"id": key, "tag": tag, "v": version})


def dl(version: int | None, key: object = 1) -> Delete:
    return Delete("t", {"id": key}, version)


@dataclass(frozen=True)
class Stored:
    """A stored row: its version (None: NULL), its mapped value, and whether it is the row
    that was there before the batch (its unmapped columns kept) or one inserted by it."""

    version: int | None
    tag: str
    original: bool


Table = dict[object, Stored]


def apply_one(table: Table, op: Op) -> None:
    """One operation as its SQL does it (the version guard, NULL compares unknown)."""
    if isinstance(op, Upsert):
        key, version = op.row["id"], op.row["v"]
        assert isinstance(version, int)
        row = table.get(key)
        if row is None:
            table[key] = Stored(version, str(op.row["tag"]), original=False)
        elif row.version is not None and row.version < version:
            table[key] = Stored(version, str(op.row["tag"]), row.original)
        return
    assert isinstance(op, Delete)
    key = op.key["id"]
    row = table.get(key)
    if row is not None and (
        op.version is None or (row.version is not None and row.version <= op.version)
    ):
        del table[key]


def record_by_record(start: Table, ops: Sequence[Op]) -> Table:
    table = dict(start)
    for op in ops:
        apply_one(table, op)
    return table


def in_rounds(start: Table, split: Rounds) -> Table:
    table = dict(start)
    for round_ops in split.rounds:
        for op in [o for o in round_ops if isinstance(o, Delete)]:  # the DELETE ... USING
            apply_one(table, op)
        for op in [o for o in round_ops if isinstance(o, Upsert)]:  # the INSERT ... ON CONFLICT
            apply_one(table, op)
    for op in split.by_record:
        apply_one(table, op)
    return table


def key_of(op: Op) -> object:
    return op.row["id"] if isinstance(op, Upsert | Append) else op.key["id"]


def check(ops: Sequence[Op], limit: int = 8) -> Rounds:
    split = split_rounds(ops, KEY, limit)
    assert split is not None
    # Every operation once; one operation per key and round; a key's in record order.
    placed = [op for r in split.rounds for op in r] + list(split.by_record)
    assert sorted(map(id, placed)) == sorted(map(id, ops))
    for round_ops in split.rounds:
        assert len({key_of(op) for op in round_ops}) == len(round_ops)
    for key in {key_of(op) for op in ops}:
        mine = [op for op in ops if key_of(op) == key]
        assert [op for r in split.rounds for op in r if key_of(op) == key] in ([], mine)
        assert [op for op in split.by_record if key_of(op) == key] in ([], mine)
    starts: list[Table] = [{}]
    for version in (None, -1, 0, 1, 2, 3, 4, 5, 6):
        starts.append({k: Stored(version, "old", True) for k in (1, 2, 3)})
    for start in starts:
        assert in_rounds(start, split) == record_by_record(start, ops), (start, ops)
    return split


@pytest.mark.parametrize(
    "ops",
    [
        [up(1, "a"), up(3, "c"), up(2, "b")],  # duplicates of one key, versions out of order
        [up(2, "a"), up(2, "b")],  # equal versions: the first one wins
        [up(2, "a"), dl(2)],  # equal versions: the delete after the upsert wins
        [dl(2), up(2, "a")],  # ... and an upsert after the delete brings it back
        [up(2, "a"), dl(3), up(4, "b")],  # delete, then insert again in one batch
        [dl(5), up(3, "a")],  # a late older upsert after a delete comes back
        [up(3, "a"), dl(1)],  # an older delete does nothing
        [dl(None), up(1, "a")],  # a delete without a version, then an upsert
        [up(1, "a", 2), dl(4, 1), up(2, "b", 2), up(5, "c", 1), dl(None, 3), up(1, "d", 3)],
    ],
)
def test_rounds_leave_every_stored_row_as_record_by_record(ops: list[Op]) -> None:
    check(ops)


def test_random_batches_of_a_few_keys() -> None:
    rng = random.Random(24)
    for _ in range(1500):
        ops: list[Op] = []
        for i in range(rng.randint(1, 14)):
            key = rng.randint(1, 3)
            if rng.random() < 0.3:
                ops.append(dl(None if rng.random() < 0.1 else rng.randint(0, 6), key))
            else:
                ops.append(up(rng.randint(0, 6), f"r{i}", key))
        check(ops, limit=rng.choice((1, 3, 8)))


def test_round_n_holds_the_nth_operation_of_each_key_in_record_order() -> None:
    a, b, c, d = up(1, "a", 7), dl(4, 8), up(2, "b", 7), up(1, "c", 9)
    assert check([a, b, c, d]) == Rounds(rounds=((a, b, d), (c,)), by_record=())


def test_a_hot_key_goes_record_by_record_and_the_others_in_rounds() -> None:
    hot = [up(v, f"h{v}", "hot") for v in range(5)]
    cold = [up(1, "x", "a"), up(1, "y", "b")]
    ops: list[Op] = [hot[0], cold[0], *hot[1:3], cold[1], *hot[3:]]
    assert split_rounds(ops, KEY, limit=4) == Rounds(rounds=(tuple(cold),), by_record=tuple(hot))


def test_nan_key_parts_are_one_key_as_in_postgresql() -> None:
    first, second = up(1, "a", Decimal("NaN")), dl(1, Decimal("NaN"))
    assert split_rounds([first, second], KEY) == Rounds(rounds=((first,), (second,)))


def test_what_cannot_be_split_is_left_to_the_record_by_record_path() -> None:
    assert split_rounds([up(1, "x", {"a": 1})], KEY) is None  # a JSON key: unhashable
    assert split_rounds([Append("t", {"id": 1, "v": 1})], KEY) is None
