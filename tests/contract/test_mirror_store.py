"""Contract of :class:`relay.mirroring.ports.MirrorStore`: the in-memory ``MemoryStore``
and ``PostgresMirrorStore`` on a migrated database with a mirrored ``items`` table.

Batches are built from records by the real decoder with the fakes' ``items`` mapping
(topic ``t``, key column ``id``, column ``name``, version = the record's offset).
The database refuses an item named ``refused`` (a CHECK constraint); the fake is told the
same through ``MemoryStore.rejects``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Protocol

import pytest
import sqlalchemy as sa

from relay.errors import MirrorOffsetConflict
from relay.mirroring.decode import decode
from relay.mirroring.mapping import parse_mapping
from relay.mirroring.ports import MirrorStore
from relay.mirroring.types import (
    ApplyResult,
    Batch,
    DeadLetter,
    Decoded,
    Delete,
    KafkaRecord,
    StoredOffset,
    TopicIdentity,
    TopicPartitionKey,
    Upsert,
)
from relay.postgres.engine import Database
from relay.postgres.mirror_catalog import resolve_tables
from relay.postgres.mirror_store import PostgresMirrorStore
from relay.runtime.secrets import Secret
from tests.contract.conftest import memory_and
from tests.fakes.mirroring import (
    ITEMS_DDL,
    ITEMS_MAPPING,
    REFUSED_NAME,
    MemoryStore,
    items_table,
    record,
)

P0: TopicPartitionKey = ("t", 0)
P1: TopicPartitionKey = ("t", 1)

Row = tuple[object, int]  # name, version
StoredDeadLetter = tuple[str, int, int, bytes | None, bytes | None, str]


def offsets(
    store: MirrorStore, partitions: list[TopicPartitionKey]
) -> dict[TopicPartitionKey, int]:
    """The stored next offsets ``store`` returns for ``partitions``."""
    return {tp: stored.next_offset for tp, stored in store.stored_offsets(partitions).items()}


def refused_by_check(op: Upsert | Delete) -> str | None:
    """The fake's stand-in for the CHECK constraint of :data:`ITEMS_DDL`."""
    if isinstance(op, Upsert) and op.row.get("name") == REFUSED_NAME:
        return 'new row for relation "items" violates check constraint'
    return None


class StoreHarness(Protocol):
    store: MirrorStore
    group: str

    def rows(self) -> dict[object, Row]:
        """The mirrored items: id -> (name, version)."""
        ...

    def dead_letters(self) -> list[StoredDeadLetter]:
        """(topic, partition, offset, key, value, error) of each stored dead letter, in
        topic, partition and offset order."""
        ...


class MemoryHarness:
    group = "memory"

    def __init__(self) -> None:
        self.memory = MemoryStore(rejects=refused_by_check)
        self.store: MirrorStore = self.memory

    def rows(self) -> dict[object, Row]:
        return {
            key[1][0]: (row["name"], int(str(row["version"])))
            for key, row in self.memory.rows.items()
        }

    def dead_letters(self) -> list[StoredDeadLetter]:
        stored = [
            (r.topic, r.partition, r.offset, r.key, r.value, d.error)
            for d in self.memory.dead
            for r in [d.record]
        ]
        return sorted(stored, key=lambda s: (s[0], s[1], s[2]))


class PostgresHarness:
    group = "contract-group"

    def __init__(self, engine: sa.Engine, database_url: str) -> None:
        self._engine = engine
        with engine.begin() as conn:
            conn.exec_driver_sql(ITEMS_DDL)
        database = Database(engine, Secret(database_url))
        tables, reflected = resolve_tables(database, parse_mapping(ITEMS_MAPPING))
        self.store: MirrorStore = PostgresMirrorStore(database, self.group, tables, reflected)

    def rows(self) -> dict[object, Row]:
        with self._engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, name, version FROM items")).all()
        return {row.id: (row.name, int(row.version)) for row in rows}

    def dead_letters(self) -> list[StoredDeadLetter]:
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    'SELECT topic, partition, "offset", key, value, error '
                    "FROM mirror_dead_letters WHERE consumer_group = :group "
                    'ORDER BY topic, partition, "offset"'
                ),
                {"group": self.group},
            ).all()
        return [
            (
                row.topic,
                row.partition,
                row.offset,
                None if row.key is None else bytes(row.key),
                None if row.value is None else bytes(row.value),
                row.error,
            )
            for row in rows
        ]


@pytest.fixture(params=memory_and("postgres"))
def mirror(request: pytest.FixtureRequest) -> Iterator[StoreHarness]:
    if request.param == "memory":
        yield MemoryHarness()
        return
    engine: sa.Engine = request.getfixturevalue("engine")
    yield PostgresHarness(engine, request.getfixturevalue("migrated_database"))


def batch(
    tp: TopicPartitionKey,
    expected: int | None,
    next_offset: int,
    *records: KafkaRecord | Decoded,
) -> Batch:
    """A batch of ``tp``; records are decoded with the items mapping."""
    table = items_table()
    items = tuple(r if isinstance(r, Decoded) else decode(r, [table]) for r in records)
    return Batch(tp[0], tp[1], expected, next_offset, items)


def no_hook() -> None:
    pass


def raw(offset: int, key: bytes | None, value: bytes | None, partition: int = 0) -> KafkaRecord:
    return KafkaRecord("t", partition, offset, key, value)


def test_nothing_is_stored_at_first(mirror: StoreHarness) -> None:
    assert offsets(mirror.store, [P0, P1]) == {}
    assert offsets(mirror.store, []) == {}
    assert mirror.rows() == {}
    assert mirror.dead_letters() == []


def test_the_first_batch_stores_its_offset_and_applies_its_records(
    mirror: StoreHarness,
) -> None:
    result = mirror.store.apply(
        batch(P0, None, 4, record(0, 1, "a"), record(1, 2, "b"), record(2, 1, "c")), no_hook
    )
    # Offset 3 is a transaction marker: the stored offset moves past it.
    assert result == ApplyResult(applied=3, skipped=0, dead_letters=())
    assert offsets(mirror.store, [P0, P1]) == {P0: 4}
    assert mirror.rows() == {1: ("c", 2), 2: ("b", 1)}


def test_batches_continue_from_the_stored_offset(mirror: StoreHarness) -> None:
    store = mirror.store
    store.apply(batch(P0, None, 2, record(0, 1, "a"), record(1, 2, "b")), no_hook)
    result = store.apply(batch(P0, 2, 5, record(2, 1, "a2"), record(3, 2, None)), no_hook)
    assert result == ApplyResult(applied=2, skipped=0)
    assert offsets(store, [P0]) == {P0: 5}
    assert mirror.rows() == {1: ("a2", 2)}
    store.apply(batch(P0, 5, 6, record(5, 2, "b2")), no_hook)
    assert offsets(store, [P0]) == {P0: 6}
    assert mirror.rows() == {1: ("a2", 2), 2: ("b2", 5)}


def test_a_batch_without_records_only_moves_the_offset(mirror: StoreHarness) -> None:
    store = mirror.store
    store.apply(batch(P0, None, 1, record(0, 1, "a")), no_hook)
    # Past aborted records and markers the consumer never showed.
    assert store.apply(batch(P0, 1, 7), no_hook) == ApplyResult(applied=0, skipped=0)
    assert offsets(store, [P0]) == {P0: 7}
    assert mirror.rows() == {1: ("a", 0)}


def test_records_no_table_takes_are_skipped(mirror: StoreHarness) -> None:
    result = mirror.store.apply(
        batch(P0, None, 2, record(0, 1, "a"), Decoded(record(1, 2, "b"))), no_hook
    )
    assert result == ApplyResult(applied=1, skipped=1)
    assert offsets(mirror.store, [P0]) == {P0: 2}
    assert mirror.rows() == {1: ("a", 0)}


def test_rows_only_move_to_higher_versions(mirror: StoreHarness) -> None:
    store = mirror.store
    store.apply(batch(P0, None, 6, record(5, 1, "new")), no_hook)
    # Partition 1 carries older versions of item 1 (lower offsets): neither the update,
    # nor one of the same version, nor the delete may win over version 5.
    result = store.apply(
        batch(
            P1,
            None,
            6,
            record(2, 1, "old", partition=1),
            record(3, 1, None, partition=1),
            record(5, 1, "same", partition=1),
        ),
        no_hook,
    )
    assert result == ApplyResult(applied=3, skipped=0)
    assert mirror.rows() == {1: ("new", 5)}
    # A delete of the same version wins (item 2), and one of a higher version (item 1).
    store.apply(batch(P1, 6, 8, record(6, 2, "other", partition=1)), no_hook)
    assert mirror.rows() == {1: ("new", 5), 2: ("other", 6)}
    store.apply(batch(P0, 6, 7, record(6, 2, None)), no_hook)
    assert mirror.rows() == {1: ("new", 5)}
    store.apply(batch(P1, 8, 9, record(8, 1, None, partition=1)), no_hook)
    assert mirror.rows() == {}
    assert offsets(store, [P0, P1]) == {P0: 7, P1: 9}


@pytest.mark.parametrize(
    ("tp", "expected"),
    [(P0, None), (P0, 1), (P0, 3), (P1, 0), (P1, 3)],
    ids=["P0-none", "P0-behind", "P0-ahead", "P1-zero", "P1-some"],
)
def test_a_wrong_expected_offset_conflicts_and_changes_nothing(
    mirror: StoreHarness, tp: TopicPartitionKey, expected: int | None
) -> None:
    store = mirror.store
    store.apply(batch(P0, None, 2, record(0, 1, "a"), record(1, 2, "b")), no_hook)
    hook_calls: list[None] = []
    doomed = batch(
        tp,
        expected,
        9,
        record(6, 1, "zombie", partition=tp[1]),
        record(7, 2, None, partition=tp[1]),
        record(8, None, "no key", partition=tp[1]),
    )
    with pytest.raises(MirrorOffsetConflict) as conflict:
        store.apply(doomed, lambda: hook_calls.append(None))
    assert (conflict.value.topic, conflict.value.partition) == tp
    assert conflict.value.expected == expected
    assert hook_calls == []
    assert offsets(store, [P0, P1]) == {P0: 2}
    assert mirror.rows() == {1: ("a", 0), 2: ("b", 1)}
    assert mirror.dead_letters() == []


def test_a_failure_before_commit_rolls_the_whole_batch_back(mirror: StoreHarness) -> None:
    store = mirror.store
    store.apply(batch(P0, None, 1, record(0, 1, "a")), no_hook)
    doomed = batch(P0, 1, 4, record(1, 1, "b"), record(2, 2, "c"), record(3, None, "x"))

    def crash() -> None:
        raise RuntimeError("crash before commit")

    with pytest.raises(RuntimeError, match="crash before commit"):
        store.apply(doomed, crash)
    assert offsets(store, [P0]) == {P0: 1}
    assert mirror.rows() == {1: ("a", 0)}
    assert mirror.dead_letters() == []
    # The same batch applies once the failure is gone.
    hook_calls: list[None] = []
    result = store.apply(doomed, lambda: hook_calls.append(None))
    assert hook_calls == [None]
    assert result.applied == 2
    assert offsets(store, [P0]) == {P0: 4}
    assert mirror.rows() == {1: ("b", 1), 2: ("c", 2)}


def test_records_that_cannot_be_decoded_are_dead_lettered(mirror: StoreHarness) -> None:
    no_key = record(1, None, "no key")
    not_json = raw(3, b"2", b"{not json")
    items = batch(P0, None, 5, record(0, 1, "a"), no_key, record(2, 2, "b"), not_json)
    result = mirror.store.apply(items, no_hook)
    errors = [item.error for item in items.items if item.error is not None]
    assert len(errors) == 2
    assert result == ApplyResult(
        applied=2,
        skipped=0,
        dead_letters=(DeadLetter(no_key, errors[0]), DeadLetter(not_json, errors[1])),
    )
    assert offsets(mirror.store, [P0]) == {P0: 5}
    assert mirror.rows() == {1: ("a", 0), 2: ("b", 2)}
    assert mirror.dead_letters() == [
        ("t", 0, 1, None, no_key.value, errors[0]),
        ("t", 0, 3, b"2", b"{not json", errors[1]),
    ]


def test_records_the_database_refuses_are_dead_lettered_and_the_rest_applied(
    mirror: StoreHarness,
) -> None:
    refused = record(2, 2, REFUSED_NAME)
    no_key = record(0, None, "no key")
    result = mirror.store.apply(
        batch(P0, None, 4, no_key, record(1, 1, "a"), refused, record(3, 3, "c")), no_hook
    )
    assert result.applied == 2
    assert result.skipped == 0
    assert [d.record for d in result.dead_letters] == [no_key, refused]
    assert all(d.error for d in result.dead_letters)
    assert offsets(mirror.store, [P0]) == {P0: 4}
    assert mirror.rows() == {1: ("a", 1), 3: ("c", 3)}
    stored = mirror.dead_letters()
    assert [(s[2], s[3], s[4]) for s in stored] == [
        (0, None, no_key.value),
        (2, b"2", json.dumps({"name": REFUSED_NAME}).encode()),
    ]
    assert [s[5] for s in stored] == [d.error for d in result.dead_letters]


def test_partitions_and_topics_have_offsets_of_their_own(mirror: StoreHarness) -> None:
    store = mirror.store
    other: TopicPartitionKey = ("u", 0)
    store.apply(batch(P0, None, 3, record(0, 1, "a")), no_hook)
    store.apply(batch(P1, None, 5, record(4, 2, "b", partition=1)), no_hook)
    store.apply(batch(other, None, 8), no_hook)
    store.apply(batch(P1, 5, 6, record(5, 3, "c", partition=1)), no_hook)
    assert offsets(store, [P0, P1, other, ("t", 2)]) == {P0: 3, P1: 6, other: 8}
    assert offsets(store, [P1]) == {P0: 3, P1: 6}  # every row of the topics asked
    assert offsets(store, [other, ("u", 1)]) == {other: 8}


def test_the_stored_offset_is_of_the_batches_topic_id(mirror: StoreHarness) -> None:
    """A row without a topic id adopts the batch's; a batch of another topic id is a
    conflict that applies nothing."""
    store = mirror.store
    first = Batch("t", 0, None, 2, (), identity=TopicIdentity("old-id", 2))
    store.apply(first, lambda: None)
    assert store.stored_offsets([P0]) == {P0: StoredOffset(2, "old-id", 2)}
    grown = Batch("t", 0, 2, 3, (), identity=TopicIdentity("old-id", 3))
    store.apply(grown, lambda: None)
    assert store.stored_offsets([P0]) == {P0: StoredOffset(3, "old-id", 3)}
    other = Batch("t", 0, 3, 4, (decode(record(3, 1, "new"), [items_table()]),))
    with pytest.raises(MirrorOffsetConflict):
        store.apply(replace(other, identity=TopicIdentity("new-id", 3)), lambda: None)
    assert store.stored_offsets([P0]) == {P0: StoredOffset(3, "old-id", 3)}
    assert mirror.rows() == {}
