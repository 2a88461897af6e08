"""Stored offsets against the topic as Kafka has it: a recreated topic (another topic id)
is refused, at assignment and before a batch whose records were read from it; rows
without an id adopt the topic's; partitions added are refused under a table versioned by
Kafka offsets and reported otherwise; what a reset moves and what it leaves."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from relay.errors import ConfigurationError, MirroredTopicChangedError
from relay.mirroring.applier import Applier
from relay.mirroring.loop import MirrorLoop
from relay.mirroring.mapping import parse_mapping
from relay.mirroring.topic_guard import (
    TopicGuard,
    check_stored,
    reset_notes,
    stale_offsets,
)
from relay.mirroring.types import (
    ColumnKind,
    ResolvedTable,
    StoredOffset,
    TopicIdentity,
    TopicPartitionKey,
)
from tests.fakes.mirroring import FakeStream, MemoryStore, items_table, logs_of, names, record
from tests.unit.mirroring.test_loop import FakeClock

P0: TopicPartitionKey = ("t", 0)
OLD = TopicIdentity("old-id", 1)
NEW = TopicIdentity("new-id", 1)


@dataclass
class FakeDirectory:
    """Kafka's topics; ``after`` replaces them after that many descriptions."""

    identities: dict[str, TopicIdentity]
    after: tuple[int, dict[str, TopicIdentity]] | None = None
    asked: list[tuple[str, ...]] = field(default_factory=list)

    def describe(self, topics: Sequence[str]) -> dict[str, TopicIdentity]:
        self.asked.append(tuple(topics))
        if self.after is not None and len(self.asked) > self.after[0]:
            self.identities = self.after[1]
        return {topic: self.identities[topic] for topic in topics}


def header_table() -> ResolvedTable:
    raw = {
        "tables": [
            {
                "table": "items",
                "topics": ["t"],
                "key": {"column": "id"},
                "version": {"column": "version", "source": "header:outbox-seq"},
                "columns": {"name": "name"},
            }
        ]
    }
    kinds = {"id": ColumnKind.INTEGER, "name": ColumnKind.TEXT, "version": ColumnKind.INTEGER}
    return ResolvedTable(parse_mapping(raw).tables[0], kinds)


def test_an_offset_of_another_topic_id_is_refused_naming_both_ids_and_the_way_out() -> None:
    stored = {0: StoredOffset(6, "old-id", 1)}
    with pytest.raises(MirroredTopicChangedError) as refused:
        check_stored("g", "t", NEW, stored, ())
    message = str(refused.value)
    for part in ("topic t", "old-id", "new-id", "t[0] at 6", "--reset-recreated-topic t"):
        assert part in message
    assert refused.value.exit_code == 2


def test_offsets_without_an_id_or_of_this_id_pass() -> None:
    check_stored("g", "t", NEW, {0: StoredOffset(6), 1: StoredOffset(3, "new-id", 1)}, ())


def test_partitions_added_are_refused_only_under_a_table_versioned_by_offsets() -> None:
    grown = TopicIdentity("id", 3)
    stored = {0: StoredOffset(6, "id", 2), 2: StoredOffset(1, "id", 3)}
    check_stored("g", "t", grown, stored, ())
    with pytest.raises(MirroredTopicChangedError, match=r"from 2 to 3 partitions.*items"):
        check_stored("g", "t", grown, stored, ("items",))


def run_loop(store: MemoryStore, stream: FakeStream, directory: FakeDirectory) -> MirrorLoop:
    tables = [items_table()]
    clock = FakeClock()
    loop = MirrorLoop(
        Applier(tables, store),
        store,
        targets=dict(stream.stable),
        clock=clock,
        guard=TopicGuard(directory, "g", tables, clock),
    )
    stream.assign(sorted(stream.stable), loop)
    loop.run(stream)
    return loop


def test_a_row_without_an_id_adopts_the_topics_with_its_next_batch() -> None:
    store = MemoryStore(offsets={P0: 1})
    stream = FakeStream(logs_of([record(0, 1, "a"), record(1, 2, "b")]), stable={P0: 2})
    run_loop(store, stream, FakeDirectory({"t": OLD}))
    assert store.identities == {P0: ("old-id", 1)}
    assert names(store) == {2: "b"}


def test_a_topic_recreated_after_assignment_is_refused_before_its_records_apply() -> None:
    """Described at assignment as the old topic, before the batch as the new one."""
    store = MemoryStore(offsets={P0: 1}, identities={P0: ("old-id", 1)})
    stream = FakeStream(logs_of([record(0, 1, "a"), record(1, 2, "b")]), stable={P0: 2})
    directory = FakeDirectory({"t": OLD}, after=(1, {"t": NEW}))
    with pytest.raises(MirroredTopicChangedError, match="old-id -> new-id"):
        run_loop(store, stream, directory)
    assert store.offsets == {P0: 1}
    assert names(store) == {}


def test_one_description_after_the_records_arrived_serves_every_partition() -> None:
    store = MemoryStore()
    stream = FakeStream(
        logs_of([record(0, 1, "a")]) | logs_of([record(0, 2, "b", 1)]),
        stable={P0: 1, ("t", 1): 1},
    )
    directory = FakeDirectory({"t": TopicIdentity("id", 2)})
    run_loop(store, stream, directory)
    assert names(store) == {1: "a", 2: "b"}
    assert len(directory.asked) == 2  # at assignment, then once for the batches of both


def test_partitions_added_while_mirrored_are_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore(offsets={P0: 1}, identities={P0: ("id", 1)})
    stream = FakeStream(logs_of([record(0, 1, "a"), record(1, 2, "b")]), stable={P0: 2})
    directory = FakeDirectory(
        {"t": TopicIdentity("id", 1)}, after=(1, {"t": TopicIdentity("id", 2)})
    )
    tables = [header_table()]
    clock = FakeClock()
    loop = MirrorLoop(
        Applier(tables, store),
        store,
        targets=dict(stream.stable),
        clock=clock,
        guard=TopicGuard(directory, "g", tables, clock),
    )
    stream.assign(sorted(stream.stable), loop)
    with caplog.at_level(logging.WARNING):
        loop.run(stream)
    grew = [r for r in caplog.records if "from 1 to 2 partitions" in r.getMessage()]
    assert len(grew) == 1
    assert store.identities == {P0: ("id", 2)}


def test_a_reset_moves_the_offsets_of_other_ids_and_of_none() -> None:
    stored = {
        P0: StoredOffset(6, "old-id", 1),
        ("t", 1): StoredOffset(2),
        ("t", 2): StoredOffset(1, "new-id", 3),
        ("u", 0): StoredOffset(9, "old-id", 1),
    }
    stale = stale_offsets("t", TopicIdentity("new-id", 3), stored)
    assert [(s.partition, s.stored.next_offset) for s in stale] == [(0, 6), (1, 2)]


def test_a_reset_is_refused_while_a_table_versioned_by_offsets_holds_rows() -> None:
    with pytest.raises(ConfigurationError, match="Kafka offsets and holds rows"):
        reset_notes("t", [items_table()], ["items"])
    assert reset_notes("t", [items_table()], []) == ()
    (note,) = reset_notes("t", [header_table()], ["items"])
    assert "keeps its rows of the old topic" in note and "header:outbox-seq" in note
