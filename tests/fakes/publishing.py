"""In-memory stand-ins for the core's ports: pure-logic unit tests only."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from relay.errors import (
    AmbiguousCommitError,
    ProducerFencedError,
    RetriableError,
    TopicMissingError,
    UndeliverableEventError,
)
from relay.kafka.publisher import record_headers
from relay.kafka.topics import single_record_batch_size
from relay.publishing.types import (
    CommittedPosition,
    OutboxIdentity,
    OutboxRecord,
    PositionOwner,
    Settled,
)
from relay.runtime.heartbeat import Heartbeat

OWNER = PositionOwner("00000000-0000-0000-0000-000000000001", "test")


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

    def count_change_pending(self) -> bool:
        return False

    # What the horizon vouches for, per partition, as a test sets it (outbox_horizon_as_of).
    facts: dict[int, Settled] = field(default_factory=dict)

    def settled(self, partition: int) -> Settled | None:
        return self.facts.get(partition)

    def high_water(self, partition: int) -> int:
        return max((r.seq for r in self.rows.get(partition, [])), default=0)

    def fetch(
        self, partition: int, after_seq: int, limit: int, up_to_seq: int | None = None
    ) -> Sequence[OutboxRecord]:
        limit_seq = up_to_seq if up_to_seq is not None else 2**63
        found = [r for r in self.rows.get(partition, []) if after_seq < r.seq <= limit_seq]
        return [
            replace(r, follows=first[1])
            if r.key is not None and (first := self.dead_keys.get(r.key)) and r.seq > first[0]
            else r
            for r in sorted(found, key=lambda r: r.seq)[:limit]
        ]

    def last_assigned_seq(self) -> int:
        return self.assigned

    dead: list[tuple[int, str]] = field(default_factory=list)
    # key -> (seq, id) of its first dead letter
    dead_keys: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    stalls: dict[int, tuple[int | None, str | None, str]] = field(default_factory=dict)

    def dead_letter(self, partition: int, outbox_ids: Sequence[int], error: str) -> int:
        # Like the database: only rows of ``partition`` that still exist move.
        before = self.rows.get(partition, [])
        moved = [r for r in before if r.id in outbox_ids]
        self.rows[partition] = [r for r in before if r.id not in outbox_ids]
        for r in moved:
            self.dead.append((r.id, error))
            if r.key is not None and r.key not in self.dead_keys:
                self.dead_keys[r.key] = (r.seq, len(self.dead))  # the dead letter's id
        return len(moved)

    def record_stall(
        self, partition: int, outbox_id: int | None, topic: str | None, reason: str
    ) -> None:
        self.stalls[partition] = (outbox_id, topic, reason)

    def clear_stall(self, partition: int) -> None:
        self.stalls.pop(partition, None)

    floors: dict[int, int] = field(default_factory=dict)
    database: OutboxIdentity = field(
        default_factory=lambda: OutboxIdentity(OWNER.database_id, "outbox-relay")
    )

    def identity(self) -> OutboxIdentity:
        return self.database

    def published_floor(self, partition: int) -> int:
        return self.floors.get(partition, 0)

    def record_published(self, partition: int, position: int, *, delete_rows: bool) -> int:
        if position <= 0:
            return 0
        self.floors[partition] = max(self.floors.get(partition, 0), position)
        if not delete_rows:
            return 0
        before = self.rows.get(partition, [])
        self.rows[partition] = [r for r in before if r.seq > position]
        return len(before) - len(self.rows[partition])


@dataclass(frozen=True)
class MemoryTopic:
    """What a destination topic accepts (``max.message.bytes``, ``cleanup.policy``)."""

    max_message_bytes: int | None = None
    compacted: bool = False
    partitions: int = 1


@dataclass
class MemoryKafka:
    """Committed records and positions, with producer epochs for fencing.

    ``topics`` are the destination topics that exist; None means every topic exists and
    accepts every record."""

    committed: list[OutboxRecord] = field(default_factory=list)
    # Committed heartbeats: (topics, heartbeat, records committed before it).
    heartbeats: list[tuple[tuple[str, ...], Heartbeat, int]] = field(default_factory=list)
    positions: dict[int, CommittedPosition] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)
    fail_next_commits: int = 0
    # One entry per coming commit: it times out (AmbiguousCommitError), after the broker
    # committed the transaction (True) or not (False); the producer is unusable until reset.
    ambiguous_next_commits: list[bool] = field(default_factory=list)
    topics: dict[str, MemoryTopic] | None = None
    # With a clock: sending takes this long per record, and a transaction still open
    # transaction_timeout_s after it began is aborted by the broker, which bumps the
    # producer's epoch (the producer finds itself fenced when it commits).
    clock: FakeClock | None = None
    send_seconds_per_record: float = 0.0
    transaction_timeout_s: float | None = None

    def publisher(self, partition: int, owner: PositionOwner = OWNER) -> MemoryPublisher:
        return MemoryPublisher(self, partition, owner)


@dataclass
class MemoryPublisher:
    """Behaves like the Kafka adapter: only the first :meth:`fence` takes the partition
    over (a producer initialises its transactions once), and an instance learns that it
    was fenced only when it commits; from then on it refuses everything."""

    kafka: MemoryKafka
    partition: int
    owner: PositionOwner = OWNER
    epoch: int | None = None
    pending: list[OutboxRecord] | None = None
    pending_heartbeats: list[tuple[tuple[str, ...], Heartbeat]] = field(default_factory=list)
    fenced: bool = False
    closed: bool = False
    stuck: bool = False  # after an ambiguous commit, like librdkafka's _STATE errors
    resets: int = 0
    began: float = 0.0
    prepared: int = 0  # batches announced (prepare), and those withdrawn
    withdrawn: int = 0

    def fence(self) -> CommittedPosition:
        if self.epoch is None:
            self.epoch = self.kafka.epochs.get(self.partition, 0) + 1
            self.kafka.epochs[self.partition] = self.epoch
        return self.kafka.positions.get(self.partition, CommittedPosition(0))

    def _check_fenced(self) -> None:
        if self.fenced:
            raise ProducerFencedError("fenced")

    def _check_usable(self) -> None:
        if self.stuck:
            raise AmbiguousCommitError("Operation not valid in state CommittingTransaction")
        if self.epoch is None:
            raise RuntimeError("fence() has not run since the producer was built")

    def prepare(self) -> None:
        self.prepared += 1

    def withdraw(self) -> None:
        self.withdrawn += 1

    def begin(self) -> None:
        self._check_fenced()
        self._check_usable()
        self.pending = []
        self.pending_heartbeats = []
        if self.kafka.clock is not None:
            self.began = self.kafka.clock.now

    def send(self, records: Sequence[OutboxRecord]) -> None:
        assert self.pending is not None
        refused = self._refused(records)
        if refused:
            ids = tuple(sorted(refused))
            raise UndeliverableEventError(
                f"Kafka refuses outbox rows {list(ids)}", ids, refused[ids[0]]
            )
        self.pending.extend(records)
        if self.kafka.clock is not None:
            self.kafka.clock.now += self.kafka.send_seconds_per_record * len(records)

    def send_heartbeats(self, topics: Sequence[str], heartbeat: Heartbeat) -> None:
        assert self.pending is not None
        if self.kafka.topics is not None and any(t not in self.kafka.topics for t in topics):
            raise TopicMissingError("heartbeat topic does not exist")
        self.pending_heartbeats.append((tuple(topics), heartbeat))

    def _refused(self, records: Sequence[OutboxRecord]) -> dict[int, str]:
        """Like the adapter's topic check: a missing topic raises, records a topic can
        never accept are refused by outbox id, before anything is sent."""
        if self.kafka.topics is None:
            return {}
        refused: dict[int, str] = {}
        for r in records:
            topic = self.kafka.topics.get(r.topic)
            if topic is None:
                ids = tuple(x.id for x in records if x.topic == r.topic)
                reason = f"topic {r.topic!r} does not exist"
                raise TopicMissingError(reason, r.topic, ids, reason)
            if topic.compacted and r.key is None:
                refused[r.id] = f"topic {r.topic} is compacted and the event has no key"
                continue
            size = single_record_batch_size(r.key, r.value, record_headers(r))
            if topic.max_message_bytes is not None and size > topic.max_message_bytes:
                refused[r.id] = (
                    f"{size} bytes exceed max.message.bytes={topic.max_message_bytes} "
                    f"of topic {r.topic} (MSG_SIZE_TOO_LARGE)"
                )
        return refused

    def commit(self, position: int) -> None:
        self._check_fenced()
        self._expire_if_too_old()
        if self.kafka.fail_next_commits:  # the broker's answer: an abort may find out more
            self.kafka.fail_next_commits -= 1
            raise RetriableError("broker hiccup")
        self._check_epoch()
        assert self.pending is not None
        if self.kafka.ambiguous_next_commits:
            landed = self.kafka.ambiguous_next_commits.pop(0)
            if landed:
                self._commit_pending(position)
            self.stuck = True
            raise AmbiguousCommitError("commit_transaction timed out")
        self._commit_pending(position)

    def _commit_pending(self, position: int) -> None:
        assert self.pending is not None
        self.kafka.committed.extend(self.pending)
        for topics, heartbeat in self.pending_heartbeats:
            self.kafka.heartbeats.append((topics, heartbeat, len(self.kafka.committed)))
        self.pending_heartbeats = []
        self.kafka.positions[self.partition] = CommittedPosition(position, self.owner)
        self.pending = None

    def abort(self) -> None:
        self._check_fenced()
        if self.stuck:
            raise AmbiguousCommitError("abort_transaction timed out")
        self._check_epoch()
        self.pending = None

    def _expire_if_too_old(self) -> None:
        clock, timeout = self.kafka.clock, self.kafka.transaction_timeout_s
        if clock is not None and timeout is not None and clock.now - self.began >= timeout:
            self.kafka.epochs[self.partition] = self.kafka.epochs.get(self.partition, 0) + 1
            self.pending = None  # the broker aborted the transaction and bumped the epoch
            self.began = clock.now

    def _check_epoch(self) -> None:
        if self.kafka.epochs.get(self.partition) != self.epoch:
            self.fenced = True
            raise ProducerFencedError("fenced")

    def reset(self) -> None:
        """A new producer with the same transactional.id: it must be fenced again (the
        transaction in doubt was settled when the commit raised)."""
        self.epoch = None
        self.pending = None
        self.stuck = False
        self.fenced = False
        self.resets += 1

    def close(self) -> None:
        self.closed = True
