"""In-memory stand-ins for the replicator's ports (relay.replication.ports)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relay.errors import AmbiguousCommitError, ProducerFencedError, RetriableError
from relay.replication.types import (
    NO_POSITION,
    LastCopy,
    Origin,
    PositionStamp,
    ReplicaPosition,
    Route,
    SourceRecord,
)
from tests.fakes.publishing import FakeClock

ROUTE = Route("orders", 0, "dr.orders")
ORIGIN = Origin("east", "orders")


def source_log(*entries: bytes | None) -> list[SourceRecord | None]:
    """A source partition: a value per offset, or None for an aborted record or a
    transaction marker (read_committed never returns those)."""
    return [
        None if value is None else SourceRecord(offset, b"k", value, (("h", b"1"),), 1000 + offset)
        for offset, value in enumerate(entries)
    ]


@dataclass
class MemorySource:
    """One source partition's log (:func:`source_log`), read read_committed."""

    log: list[SourceRecord | None]
    reads: int = 0

    def reader(self) -> MemoryReader:
        return MemoryReader(self)


@dataclass
class MemoryReader:
    source: MemorySource
    next_offset: int = 0
    closed: bool = False

    def seek(self, next_offset: int) -> None:
        self.next_offset = next_offset

    def read(self, max_records: int, wait_s: float) -> Sequence[SourceRecord]:
        self.source.reads += 1
        log, found = self.source.log, []
        while self.next_offset < len(log) and len(found) < max_records:
            entry = log[self.next_offset]
            self.next_offset += 1
            if entry is not None:
                found.append(entry)
        return found

    def position(self) -> int:
        return self.next_offset

    def end_offset(self) -> int:
        return len(self.source.log)

    def close(self) -> None:
        self.closed = True


@dataclass
class MemoryTarget:
    """The target partition's committed copies and the replicator's position, with
    producer epochs for fencing."""

    copies: list[SourceRecord] = field(default_factory=list)
    position: ReplicaPosition = NO_POSITION
    epoch: int = 0
    fail_next_commits: int = 0
    fail_next_fences: int = 0  # the broker does not answer the position's read
    # One entry per coming commit: it times out after the broker committed it (True) or not.
    ambiguous_next_commits: list[bool] = field(default_factory=list)
    # With a clock: a transaction open transaction_timeout_s or longer is aborted by the
    # broker, which bumps the epoch; sending takes send_seconds per record.
    clock: FakeClock | None = None
    transaction_timeout_s: float | None = None
    send_seconds: float = 0.0
    commits: int = 0

    last_writer: MemoryWriter | None = None

    def writer(self, origin: Origin = ORIGIN) -> MemoryWriter:
        self.last_writer = MemoryWriter(self, origin)
        return self.last_writer


@dataclass
class MemoryWriter:
    target: MemoryTarget
    origin: Origin
    epoch: int | None = None
    pending: list[SourceRecord] | None = None
    fenced: bool = False
    stuck: bool = False
    resets: int = 0
    aborts: int = 0
    began: float = 0.0
    stamp: PositionStamp | None = None

    def fence(self) -> ReplicaPosition:
        if self.target.fail_next_fences:
            self.target.fail_next_fences -= 1
            raise RetriableError("reading the committed position failed: Local: Timed out")
        if self.epoch is None:
            self.target.epoch += 1
            self.epoch = self.target.epoch
        return self.target.position

    def begin(self) -> None:
        if self.fenced:
            raise ProducerFencedError("fenced")
        if self.stuck:
            raise AmbiguousCommitError("Operation not valid in state CommittingTransaction")
        self.pending = []
        if self.target.clock is not None:
            self.began = self.target.clock.now

    def send(self, records: Sequence[SourceRecord]) -> None:
        assert self.pending is not None
        self.pending.extend(records)
        if self.target.clock is not None:
            self.target.clock.now += self.target.send_seconds * len(records)

    def commit(self, next_offset: int, stamp: PositionStamp) -> None:
        self.stamp = stamp
        target = self.target
        clock, timeout = target.clock, target.transaction_timeout_s
        if clock is not None and timeout is not None and clock.now - self.began >= timeout:
            target.epoch += 1  # the broker aborted it for its age
        if target.fail_next_commits:
            target.fail_next_commits -= 1
            raise RetriableError("broker hiccup")
        if target.epoch != self.epoch:
            self.fenced = True
            raise ProducerFencedError("fenced")
        if target.ambiguous_next_commits:
            if target.ambiguous_next_commits.pop(0):
                self._commit(next_offset)
            self.stuck = True
            raise AmbiguousCommitError("commit_transaction timed out")
        self._commit(next_offset)

    def _commit(self, next_offset: int) -> None:
        assert self.pending is not None
        self.target.copies.extend(self.pending)
        self.target.commits += 1
        self.target.position = ReplicaPosition(next_offset, self.stamp)
        self.pending = None

    def position(self) -> ReplicaPosition:
        return self.target.position

    def last_copy(self, since: int) -> LastCopy | None:
        copies = self.target.copies
        if len(copies) <= since:
            return None
        return LastCopy(len(copies) - 1, self.origin.cluster, ROUTE.topic, copies[-1].offset)

    def stable_end(self) -> int:
        return len(self.target.copies)

    def abort(self) -> None:
        self.aborts += 1
        if self.fenced or self.target.epoch != self.epoch:
            self.fenced = True
            raise ProducerFencedError("fenced")
        self.pending = None

    def reset(self) -> None:
        self.epoch = None
        self.pending = None
        self.stuck = False
        self.fenced = False
        self.resets += 1

    def close(self) -> None:
        pass
