"""Contract of ``MirrorStore.apply_together``: the batches of several partitions in one
transaction, as if applied one after the other, or nothing at all (the in-memory
``MemoryStore`` and ``PostgresMirrorStore``, as in test_mirror_store)."""

from __future__ import annotations

import pytest

from relay.errors import MirrorOffsetConflict
from relay.mirroring.types import ApplyResult
from tests.contract.test_mirror_store import (
    P0,
    P1,
    StoreHarness,
    batch,
    mirror,
    no_hook,
    offsets,
)
from tests.fakes.mirroring import REFUSED_NAME, record

__all__ = ["mirror"]  # the fixture


def test_batches_applied_together_give_what_they_give_one_after_the_other(
    mirror: StoreHarness,
) -> None:
    store = mirror.store
    store.apply(batch(P0, None, 1, record(0, 1, "a")), no_hook)
    results = store.apply_together(
        [
            batch(P0, 1, 3, record(1, 1, "a1"), record(2, 2, "b")),
            # Item 1 again, at a lower version (versions are offsets here): it loses, as
            # it would applied after the other batch.
            batch(P1, None, 2, record(0, 1, "old", partition=1), record(1, 3, "c", partition=1)),
        ],
        no_hook,
    )
    assert results == [ApplyResult(applied=2, skipped=0), ApplyResult(applied=2, skipped=0)]
    assert offsets(store, [P0, P1]) == {P0: 3, P1: 2}
    assert mirror.rows() == {1: ("a1", 1), 2: ("b", 2), 3: ("c", 1)}


def test_batches_applied_together_with_one_offset_moved_apply_nothing(
    mirror: StoreHarness,
) -> None:
    store = mirror.store
    store.apply(batch(P1, None, 1, record(0, 5, "e", partition=1)), no_hook)
    with pytest.raises(MirrorOffsetConflict) as raised:
        store.apply_together(
            [
                batch(P0, None, 1, record(0, 1, "a")),
                batch(P1, None, 2, record(1, 2, "b", partition=1)),  # stored: 1
            ],
            no_hook,
        )
    assert raised.value.partition == 1
    assert offsets(store, [P0, P1]) == {P1: 1}
    assert mirror.rows() == {5: ("e", 0)}


def test_batches_applied_together_with_a_refused_record_apply_nothing(
    mirror: StoreHarness,
) -> None:
    store = mirror.store
    refused = store.apply_together(
        [
            batch(P0, None, 1, record(0, 1, "a")),
            batch(P1, None, 2, record(0, 2, "b", partition=1), record(1, 3, REFUSED_NAME, 1)),
        ],
        no_hook,
    )
    assert refused is None
    assert offsets(store, [P0, P1]) == {}
    assert mirror.rows() == {}
    assert mirror.dead_letters() == []
