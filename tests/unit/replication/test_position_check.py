"""A replicated partition's position checked against its stamp and the target's last copy
(relay.replication.position_check), over in-memory ports."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass, field

import pytest

from relay.errors import KafkaError, ReplicaPositionError
from relay.replication.partition_replicator import PartitionReplicator
from relay.replication.ports import TopicIds
from relay.replication.types import NO_POSITION, PositionStamp, ReplicaPosition, SourceRecord
from tests.fakes.publishing import FakeClock
from tests.fakes.replication import (
    ORIGIN,
    ROUTE,
    MemoryReader,
    MemorySource,
    MemoryTarget,
    source_log,
)


@dataclass
class Ids:
    """Topic ids that an operator may change (a topic deleted and created again)."""

    ids: dict[str, str] = field(default_factory=lambda: {"orders": "S1", "dr.orders": "T1"})

    def source(self, topic: str, since: float) -> str | None:
        return self.ids[topic]

    def target(self, topic: str, since: float) -> str | None:
        return self.ids[topic]


def make(
    source: MemorySource,
    target: MemoryTarget,
    ids: TopicIds,
    prefix: str = "dr",
    checks: Executor | None = None,
) -> PartitionReplicator:
    return PartitionReplicator(
        ROUTE,
        source.reader(),
        target.writer(),
        origin=ORIGIN,
        clock=FakeClock(),
        batch_size=2,
        ids=ids,
        owner=PositionStamp(ORIGIN, "cluster-1", prefix=prefix),
        checks=checks,
    )


def grow(source: MemorySource, *values: bytes) -> None:
    """Records written to the source partition after those it holds."""
    source.log[:] = source_log(*(r.value for r in source.log if r is not None), *values)


def copied(values: int = 4) -> tuple[MemorySource, MemoryTarget, Ids]:
    source = MemorySource(source_log(*(b"v%d" % n for n in range(values))))
    target, ids = MemoryTarget(), Ids()
    make(source, target, ids).drain(values)
    return source, target, ids


def test_the_stamp_names_the_ids_and_the_prefix() -> None:
    _, target, _ = copied()
    assert target.position == ReplicaPosition(
        4, PositionStamp(ORIGIN, "cluster-1", "S1", "T1", "dr")
    )
    assert PositionStamp.from_text(PositionStamp(ORIGIN, since=7).text()) == PositionStamp(
        ORIGIN, since=7
    )


def test_a_recreated_source_topic_is_refused() -> None:
    source, target, ids = copied()
    ids.ids["orders"] = "S2"
    grow(source, *(b"n" for _ in range(9)))  # the new topic is longer
    with pytest.raises(ReplicaPositionError, match="--reset-recreated-topic orders"):
        make(source, target, ids).start()


def test_a_source_topic_recreated_while_copying_is_refused_before_its_batch() -> None:
    source, target, ids = copied()
    replicator = make(source, target, ids)
    replicator.start()
    grow(source, b"x", b"y")
    ids.ids["orders"] = "S2"
    with pytest.raises(ReplicaPositionError, match="while it was copied"):
        replicator.copy_batch()
    assert len(target.copies) == 4


def test_a_lost_position_is_refused_while_copies_exist() -> None:
    source, target, ids = copied()
    target.position = NO_POSITION
    with pytest.raises(ReplicaPositionError, match="--restore-positions"):
        make(source, target, ids).start()


@pytest.mark.parametrize("moved", [0, 3, 9])
def test_a_moved_position_is_refused(moved: int) -> None:
    source, target, ids = copied()
    target.position = ReplicaPosition(moved)  # reset by hand: no stamp
    with pytest.raises(ReplicaPositionError, match="last copy is of source offset 3"):
        make(source, target, ids).start()


def test_another_prefix_is_refused() -> None:
    source, target, ids = copied()
    with pytest.raises(ReplicaPositionError, match="prefix 'dr', this one has 'other'"):
        make(source, target, ids, prefix="other").start()


def test_a_recreated_target_topic_is_copied_again_from_the_start() -> None:
    source, target, ids = copied()
    replicator = make(source, target, ids)
    replicator.start()
    ids.ids["dr.orders"] = "T2"
    target.copies.clear()  # the new target topic
    target.position = NO_POSITION  # its group offsets went with the old one
    grow(source, b"x")
    assert replicator.copy_batch() is None  # restarted: fenced, position read again
    assert replicator.next_offset == 0
    replicator.drain(5)
    assert [r.offset for r in target.copies] == [0, 1, 2, 3, 4]


def test_a_fatal_error_aborts_the_open_transaction() -> None:
    source, target, ids = copied()
    grow(source, b"x")
    replicator = make(source, target, ids)
    replicator.start()
    writer = target.last_writer
    assert writer is not None

    def refuse(records: object) -> None:
        raise KafkaError("the target refuses the record")

    writer.send = refuse  # type: ignore[method-assign]
    with pytest.raises(KafkaError):
        replicator.copy_batch()
    assert writer.aborts == 1


def test_a_fatal_error_keeping_the_position_alive_aborts_its_transaction() -> None:
    source, target, ids = copied()
    replicator = make(source, target, ids)
    replicator.start()
    writer = target.last_writer
    assert writer is not None

    def refuse(next_offset: int, stamp: PositionStamp) -> None:
        raise KafkaError("the group is not authorized")

    writer.commit = refuse  # type: ignore[method-assign]
    with pytest.raises(KafkaError):
        replicator.keep_alive_if_due(0.0)
    assert writer.aborts == 1


def test_another_prefix_committing_meanwhile_is_refused_before_the_next_batch() -> None:
    source = MemorySource(source_log(b"a", b"b", b"c", b"d"))
    target, ids = MemoryTarget(), Ids()
    mine, other = make(source, target, ids), make(source, target, ids, prefix="other")
    mine.start()
    other.start()  # both saw no position (the fake has one transactional id: other's)
    other.copy_batch()
    with pytest.raises(ReplicaPositionError, match="prefix 'other', this one has 'dr'"):
        mine.copy_batch()
    assert len(target.copies) == 2


def test_a_source_topic_recreated_shorter_while_copying_is_refused_with_the_way_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, target, ids = copied()
    replicator = make(source, target, ids)
    replicator.start()
    ids.ids["orders"] = "S2"

    def ends_below(reader: MemoryReader, max_records: int, wait_s: float) -> list[SourceRecord]:
        raise KafkaError(
            f"{ROUTE}: the source partition ends at offset 0, below the next offset to copy "
            f"({reader.next_offset}): its log was truncated or the topic recreated"
        )

    monkeypatch.setattr(MemoryReader, "read", ends_below)
    with pytest.raises(ReplicaPositionError, match="--reset-recreated-topic orders"):
        replicator.copy_batch()
    ids.ids["orders"] = "S1"  # the same topic, truncated: the reader's error stands
    with pytest.raises(KafkaError, match="truncated"):
        replicator.copy_batch()
