"""The time a replicated partition is complete through (relay.replication.freshness): a
probe of the source's last stable offset, vouched for once everything below it is copied
or skipped; fresh on an idle source, carried by the positions on the target."""

from __future__ import annotations

from relay.errors import RetriableError
from relay.replication.freshness import Freshness
from relay.replication.partition_replicator import PartitionReplicator
from relay.replication.ports import NoReplicaObserver
from relay.replication.types import PositionStamp, ReplicaPosition
from tests.fakes.publishing import FakeClock
from tests.fakes.replication import ORIGIN, ROUTE, MemorySource, MemoryTarget, source_log
from tests.unit.replication.test_partition_replicator import make as replicator

EPOCH_S = 1_800_000_000.0


class Through(NoReplicaObserver):
    """A ReplicaObserver that keeps what each complete_through said."""

    def __init__(self) -> None:
        self.times: list[int] = []

    def complete_through(self, topic: str, partition: int, as_of_ms: int) -> None:
        self.times.append(as_of_ms)


def make(
    source: MemorySource, target: MemoryTarget, clock: FakeClock, observer: Through, **kw: object
) -> PartitionReplicator:
    wall = lambda: EPOCH_S + clock.now  # noqa: E731
    return replicator(source, target, clock, observer=observer, heartbeat_s=5.0, wall=wall, **kw)


def ms(seconds: float) -> int:
    return int((EPOCH_S + seconds) * 1000)


def test_an_idle_source_stays_fresh_without_a_record_or_a_commit() -> None:
    source = MemorySource(source_log(b"a", None))  # a record, then its commit marker
    target = MemoryTarget()
    clock, seen = FakeClock(), Through()
    replicator = make(source, target, clock, seen)
    replicator.start()
    assert replicator.copy_batch() is not None  # probe at 0 s (end 2); copies offset 0
    commits = target.commits
    for _ in range(3):
        clock.now += 5.0
        assert replicator.copy_batch() is None  # nothing new: the probe is settled at once
    # The marker at offset 1 is all that lies between the position and the end.
    assert seen.times == [ms(0), ms(5), ms(10), ms(15)]
    assert target.commits == commits  # vouched for in memory; nothing written


def test_a_probe_is_vouched_for_only_once_everything_below_it_is_copied() -> None:
    source = MemorySource(source_log(b"a", b"b", b"c", b"d"))
    target = MemoryTarget()
    clock, seen = FakeClock(), Through()
    replicator = make(source, target, clock, seen, batch_size=2)
    replicator.start()
    replicator.copy_batch()  # probe at 0 s: the end is 4; offsets 0 and 1 copied
    assert seen.times == []
    assert target.position.stamp is not None and target.position.stamp.as_of_ms is None
    source.log.extend(source_log(b"e", b"f", b"g", b"h")[4:])  # written after the probe
    clock.now += 1.0
    replicator.copy_batch()  # offsets 2 and 3: the probe's end reached, in this commit
    assert seen.times == [ms(0)]
    assert target.position == ReplicaPosition(4, PositionStamp(ORIGIN, as_of_ms=ms(0)))
    clock.now += 1.0
    replicator.copy_batch()  # 4 and 5: no new probe before 5 s; the stamp keeps its time
    assert target.position.stamp == PositionStamp(ORIGIN, as_of_ms=ms(0))


def test_a_restart_keeps_the_time_its_position_was_committed_with() -> None:
    source = MemorySource(source_log(b"a", b"b"))
    target = MemoryTarget()
    clock, seen = FakeClock(), Through()
    first = make(source, target, clock, seen)
    first.start()
    first.copy_batch()
    assert target.position.stamp == PositionStamp(ORIGIN, as_of_ms=ms(0))
    later = Through()
    second = make(source, target, clock, later)
    second.start()  # a new instance: the committed time holds for it too
    assert later.times == [ms(0)]


def test_a_failed_read_of_the_source_end_skips_the_probe_not_the_copy() -> None:
    clock = FakeClock()
    freshness = Freshness(5.0, clock, lambda: EPOCH_S)

    def unreachable() -> int:
        raise RetriableError("source broker down")

    freshness.probe_if_due(unreachable, ROUTE)
    assert freshness.covered(10**9) is None
    clock.now += 5.0
    freshness.probe_if_due(lambda: 3, ROUTE)
    assert freshness.covered(2) is None and freshness.covered(3) == int(EPOCH_S * 1000)


def test_no_probe_when_the_heartbeat_is_off() -> None:
    freshness = Freshness(0.0, FakeClock(), lambda: EPOCH_S)
    freshness.probe_if_due(lambda: 0, ROUTE)
    assert freshness.covered(0) is None
