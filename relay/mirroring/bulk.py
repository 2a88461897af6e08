"""One batch's operations on one current-state table, split into rounds that set-based
statements can apply with the same result as applying them record by record. Pure.

Record by record, the operations of different keys never meet: only the order of each
key's own operations matters. So the batch is applied in rounds: round 1 holds the first
operation of every key, round 2 the second one of every key that has two, ... Each round
has at most one operation per key (one ``INSERT ... ON CONFLICT DO UPDATE`` may not touch
a row twice), and a key's operations run in its record order, each as its own statement
would run it: the version guard sees the row the key's previous operation left, a row
deleted and upserted again comes back as a new row, a row trigger fires once per
operation. A record the database refuses fails its round's statement: the store then
applies the batch record by record, to dead-letter that record alone.

A key with more than ``limit`` operations in the batch (a hot key) would need as many
rounds, each a statement over the whole batch: its operations go record by record
instead (the store's pipelined statements), in record order.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from relay.mirroring.types import Delete, Op, Upsert

_nan = object()  # one key part for every NaN (PostgreSQL finds NaN equal to NaN)
ROUNDS_LIMIT = 8
"""The most operations of one key (and so rounds) one batch applies in bulk."""


@dataclass(frozen=True, slots=True)
class Rounds:
    """A table's operations of one batch: ``rounds[i]`` holds the (i+1)-th operation of
    each key that has one, in record order; ``by_record`` the operations of the hot
    keys, in record order."""

    rounds: tuple[tuple[Upsert | Delete, ...], ...]
    by_record: tuple[Op, ...] = ()


def split_rounds(
    ops: Sequence[Op], key_columns: Sequence[str], limit: int = ROUNDS_LIMIT
) -> Rounds | None:
    """``ops`` (upserts and deletes of one table, in record order) in rounds; None when
    they cannot be split: an operation of another kind, or a key Python cannot compare
    (e.g. a JSON key column). Apply them record by record then."""
    placed: list[tuple[Hashable, Upsert | Delete]] = []
    counts: dict[Hashable, int] = {}
    rounds: list[list[Upsert | Delete]] = []
    single = key_columns[0] if len(key_columns) == 1 else None
    try:
        for op in ops:
            if type(op) is Upsert:
                source: Mapping[str, object] = op.row
            elif type(op) is Delete:
                source = op.key
            else:
                return None
            if single is not None:  # the part itself: grouped as its 1-tuple would be
                key: Hashable = _nan if (part := source[single]) != part else part
            else:
                key = tuple(_nan if (part := source[c]) != part else part for c in key_columns)
            done = counts.get(key, 0)  # TypeError if the key cannot be hashed
            counts[key] = done + 1
            if done == len(rounds):
                rounds.append([])
            rounds[done].append(op)
            placed.append((key, op))
    except TypeError:
        return None
    if len(rounds) <= limit:  # no key has more operations than that
        return Rounds(tuple(map(tuple, rounds)))
    hot = {key for key, count in counts.items() if count > limit}
    return Rounds(
        _in_rounds([(key, op) for key, op in placed if key not in hot]),
        tuple(op for key, op in placed if key in hot),
    )


def _in_rounds(
    placed: Sequence[tuple[Hashable, Upsert | Delete]],
) -> tuple[tuple[Upsert | Delete, ...], ...]:
    """The rounds of (key, operation) pairs in record order."""
    counts: dict[Hashable, int] = {}
    rounds: list[list[Upsert | Delete]] = []
    for key, op in placed:
        done = counts.get(key, 0)
        counts[key] = done + 1
        if done == len(rounds):
            rounds.append([])
        rounds[done].append(op)
    return tuple(map(tuple, rounds))
