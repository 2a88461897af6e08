"""In-memory stand-ins for the core's ports: pure-logic unit tests only."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from relay.errors import ProducerFencedError, RetriableError
from relay.types import OutboxRecord


class FakeClock:
    """Time that passes only when waited for."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wait(self, seconds: float, stop: threading.Event | None = None) -> bool:
        self.now += seconds
        return stop is not None and stop.is_set()


def record(partition: int, seq: int, key: bytes = b"k") -> OutboxRecord:
    return OutboxRecord(seq, partition, seq, "t", key, b"v%d" % seq, None, ())


@dataclass
class MemoryOutbox:
    rows: dict[int, list[OutboxRecord]] = field(default_factory=dict)
    assigned: int = 0

    def add(self, *records: OutboxRecord) -> None:
        for r in records:
            self.rows.setdefault(r.partition, []).append(r)
            self.assigned = max(self.assigned, r.seq)

    def high_water(self, partition: int) -> int:
        return max((r.seq for r in self.rows.get(partition, [])), default=0)

    def fetch(
        self, partition: int, after_seq: int, limit: int, up_to_seq: int | None = None
    ) -> Sequence[OutboxRecord]:
        limit_seq = up_to_seq if up_to_seq is not None else 2**63
        found = [r for r in self.rows.get(partition, []) if after_seq < r.seq <= limit_seq]
        return sorted(found, key=lambda r: r.seq)[:limit]

    def last_assigned_seq(self) -> int:
        return self.assigned

    dead: list[tuple[int, str]] = field(default_factory=list)

    def dead_letter(self, partition: int, outbox_ids: Sequence[int], error: str) -> int:
        before = self.rows.get(partition, [])
        self.rows[partition] = [r for r in before if r.id not in outbox_ids]
        self.dead.extend((i, error) for i in outbox_ids)
        return len(before) - len(self.rows[partition])

    def delete_published(self, partition: int, up_to_seq: int) -> int:
        before = self.rows.get(partition, [])
        self.rows[partition] = [r for r in before if r.seq > up_to_seq]
        return len(before) - len(self.rows[partition])


@dataclass
class MemoryKafka:
    """Committed records and positions, with producer epochs for fencing."""

    committed: list[OutboxRecord] = field(default_factory=list)
    positions: dict[int, int] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)
    fail_next_commits: int = 0

    def publisher(self, partition: int) -> MemoryPublisher:
        return MemoryPublisher(self, partition)


@dataclass
class MemoryPublisher:
    kafka: MemoryKafka
    partition: int
    epoch: int = -1
    pending: list[OutboxRecord] | None = None
    closed: bool = False

    def fence(self) -> int:
        self.epoch = self.kafka.epochs.get(self.partition, 0) + 1
        self.kafka.epochs[self.partition] = self.epoch
        return self.kafka.positions.get(self.partition, 0)

    def _check_epoch(self) -> None:
        if self.kafka.epochs[self.partition] != self.epoch:
            raise ProducerFencedError("fenced")

    def begin(self) -> None:
        self._check_epoch()
        self.pending = []

    def send(self, records: Sequence[OutboxRecord]) -> None:
        assert self.pending is not None
        self.pending.extend(records)

    def commit(self, position: int) -> None:
        self._check_epoch()
        if self.kafka.fail_next_commits:
            self.kafka.fail_next_commits -= 1
            raise RetriableError("broker hiccup")
        assert self.pending is not None
        self.kafka.committed.extend(self.pending)
        self.kafka.positions[self.partition] = position
        self.pending = None

    def abort(self) -> None:
        self.pending = None

    def close(self) -> None:
        self.closed = True
