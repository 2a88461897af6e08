"""In-memory stand-ins for the mirror's ports: pure-logic unit tests only."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from relay.errors import KafkaError, MirrorOffsetConflict, RecordMayHealError, RetriableError
from relay.mirroring.mapping import parse_mapping
from relay.mirroring.ports import AssignmentListener
from relay.mirroring.types import (
    Append,
    ApplyResult,
    Batch,
    ColumnKind,
    DeadLetter,
    KafkaRecord,
    Op,
    PartitionEnd,
    ResolvedTable,
    StoredOffset,
    TopicPartitionKey,
    Upsert,
)

REFUSED_NAME = "refused"
ITEMS_DDL = f"""
CREATE TABLE items (
    id integer PRIMARY KEY,
    name text CHECK (name <> '{REFUSED_NAME}'),
    version bigint NOT NULL
)
"""
"""The table :data:`ITEMS_MAPPING` mirrors into, in PostgreSQL: it refuses an item named
:data:`REFUSED_NAME`."""
ITEMS_MAPPING = {
    "tables": [
        {
            "table": "items",
            "topics": ["t"],
            "key": {"column": "id"},
            "version": {"column": "version", "source": "offset"},
            "columns": {"name": "name"},
        }
    ]
}
ITEMS_KINDS = {"id": ColumnKind.INTEGER, "name": ColumnKind.TEXT, "version": ColumnKind.INTEGER}


def items_table() -> ResolvedTable:
    return ResolvedTable(parse_mapping(ITEMS_MAPPING).tables[0], ITEMS_KINDS)


def record(offset: int, item_id: int | None, name: str | None, partition: int = 0) -> KafkaRecord:
    value = None if name is None else json.dumps({"name": name}).encode()
    key = None if item_id is None else str(item_id).encode()
    return KafkaRecord("t", partition, offset, key, value)


@dataclass
class MemoryStore:
    """Offsets with compare-and-set, version-guarded rows, dead letters, applied log.

    ``rejects`` stands in for the database's constraints: the reason it refuses an
    operation, or None. A record with a refused operation is dead-lettered whole and the
    rest of its batch still applies, as PostgreSQL's per-record savepoints do."""

    offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)
    rows: dict[tuple[str, tuple[object, ...]], dict[str, object]] = field(default_factory=dict)
    dead: list[DeadLetter] = field(default_factory=list)
    applied: list[tuple[str, int, int]] = field(default_factory=list)  # topic, partition, offset
    identities: dict[TopicPartitionKey, tuple[str | None, int | None]] = field(
        default_factory=dict
    )  # the topic id and partition count stored with an offset
    fail_next: int = 0
    before_apply: Callable[[Batch], None] | None = None
    rejects: Callable[[Op], str | None] | None = None
    together: list[tuple[TopicPartitionKey, ...]] = field(default_factory=list)
    """The partitions of each call of apply_together, in order."""
    refuses_for_now: Callable[[Op], str | None] | None = None
    """Like ``rejects``, for errors that may heal (a missing parent): the batch rolls back
    with RecordMayHealError until ``batch.waited`` says to dead-letter the record."""

    def stored_offsets(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, StoredOffset]:
        topics = {topic for topic, _ in partitions}
        return {
            tp: StoredOffset(offset, *self.identities.get(tp, (None, None)))
            for tp, offset in self.offsets.items()
            if tp[0] in topics
        }

    def apply(self, batch: Batch, before_commit: Callable[[], None]) -> ApplyResult:
        self._check(batch)
        for_now = self._refused_for_now(batch)
        if for_now is not None and batch.waited is None:
            raise RecordMayHealError(for_now)
        before_commit()
        return self._applied(batch)

    def apply_together(
        self, batches: Sequence[Batch], before_commit: Callable[[], None]
    ) -> list[ApplyResult] | None:
        """As PostgreSQL's bulk statements: None (nothing applied) when a record is refused,
        for good or for now."""
        self.together.append(tuple((b.topic, b.partition) for b in batches))
        for batch in batches:
            self._check(batch)
        ops = [op for batch in batches for item in batch.items for op in item.ops]
        if any(
            self._refused([op]) or (self.refuses_for_now and self.refuses_for_now(op)) for op in ops
        ):
            return None
        before_commit()
        return [self._applied(batch) for batch in batches]

    def _check(self, batch: Batch) -> None:
        """Before anything is applied: a failure asked for, or an offset that moved."""
        if self.before_apply is not None:
            self.before_apply(batch)
        if self.fail_next:
            self.fail_next -= 1
            raise RetriableError("connection lost")
        tp = (batch.topic, batch.partition)
        stored_id = self.identities.get(tp, (None, None))[0]
        if self.offsets.get(tp) != batch.expected or (
            batch.identity is not None and stored_id not in (None, batch.identity.topic_id)
        ):
            raise MirrorOffsetConflict("moved", batch.topic, batch.partition, batch.expected)

    def _applied(self, batch: Batch) -> ApplyResult:
        tp = (batch.topic, batch.partition)
        self.offsets[tp] = batch.next_offset
        if batch.identity is not None:
            self.identities[tp] = (batch.identity.topic_id, batch.identity.partitions)
        applied = 0
        dead: list[DeadLetter] = []
        for item in batch.items:
            refused = self._refused(item.ops)
            if refused is None and self.refuses_for_now is not None:
                later = next(filter(None, map(self.refuses_for_now, item.ops)), None)
                if later is not None:
                    refused = f"{later} (after {batch.waited} attempts)"
            if item.error is not None:
                dead.append(DeadLetter(item.record, item.error))
            elif refused is not None:
                dead.append(DeadLetter(item.record, f"database rejected the record: {refused}"))
            elif item.ops:
                applied += 1
                self.applied.append((item.record.topic, item.record.partition, item.record.offset))
                for op in item.ops:
                    self._run(op)
        self.dead.extend(dead)
        return ApplyResult(applied, sum(1 for i in batch.items if i.skipped), tuple(dead))

    def _refused_for_now(self, batch: Batch) -> str | None:
        if self.refuses_for_now is None:
            return None
        ops = (op for item in batch.items for op in item.ops)
        return next(filter(None, map(self.refuses_for_now, ops)), None)

    def _refused(self, ops: Sequence[Op]) -> str | None:
        if self.rejects is None:
            return None
        return next((reason for op in ops if (reason := self.rejects(op)) is not None), None)

    def _run(self, op: Op) -> None:
        if isinstance(op, Append):  # a changelog's row, once per (key, version)
            self.rows.setdefault((op.table, (op.row["id"], op.row["version"])), dict(op.row))
        elif isinstance(op, Upsert):
            key = (op.table, (op.row["id"],))
            current = self.rows.get(key)
            if current is None or int(str(current["version"])) < int(str(op.row["version"])):
                self.rows[key] = dict(op.row)
        else:
            key = (op.table, (op.key["id"],))
            current = self.rows.get(key)
            if current is not None and (
                op.version is None or int(str(current["version"])) <= op.version
            ):
                del self.rows[key]


@dataclass
class FakeStream:
    """Partition logs with a last stable offset each; delivers records in offset order,
    then a PartitionEnd at the last stable offset, like a read_committed consumer.
    Offsets missing from a log stand for transaction markers or aborted records; records
    at or past the last stable offset belong to open transactions.

    Like librdkafka, it reports a PartitionEnd again whenever the last stable offset moves
    past the position (also over aborted records and markers alone), and a position past
    the end of the log (the last stable offset, or past the last record) is an error."""

    logs: dict[TopicPartitionKey, list[KafkaRecord]] = field(default_factory=dict)
    stable: dict[TopicPartitionKey, int] = field(default_factory=dict)
    positions: dict[TopicPartitionKey, int] = field(default_factory=dict)
    ended: set[TopicPartitionKey] = field(default_factory=set)
    seeks: list[tuple[TopicPartitionKey, int | None]] = field(default_factory=list)
    listener: AssignmentListener | None = None
    on_poll: Callable[[FakeStream], None] | None = None

    def assign(self, partitions: Sequence[TopicPartitionKey], listener: AssignmentListener) -> None:
        self.listener = listener
        starts = listener.assigned(list(partitions))
        for tp in partitions:
            self.positions[tp] = starts[tp] or 0
            self.ended.discard(tp)

    def revoke(self, partitions: Sequence[TopicPartitionKey]) -> None:
        if self.listener is not None:
            self.listener.revoked(list(partitions))
        for tp in partitions:
            self.positions.pop(tp, None)

    def poll(self, timeout: float) -> KafkaRecord | PartitionEnd | None:
        if self.on_poll is not None:
            self.on_poll(self)
        for tp, position in sorted(self.positions.items()):
            log, stable = self.logs.get(tp, []), self.stable[tp]
            end = max([stable, *(r.offset + 1 for r in log)])
            if position > end:
                raise KafkaError(
                    f"{tp[0]}[{tp[1]}]: offset {position} is past the end of the log ({end})"
                )
            upcoming = [r for r in log if position <= r.offset < stable]
            if upcoming:
                self.positions[tp] = upcoming[0].offset + 1
                self.ended.discard(tp)
                return upcoming[0]
            if tp not in self.ended or position < stable:
                self.ended.add(tp)
                self.positions[tp] = max(position, stable)
                return PartitionEnd(tp[0], tp[1], self.positions[tp])
        return None

    def seek(self, topic: str, partition: int, offset: int | None) -> None:
        self.seeks.append(((topic, partition), offset))
        self.positions[(topic, partition)] = offset or 0
        self.ended.discard((topic, partition))

    def last_stable_offsets(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, int]:
        return {tp: self.stable[tp] for tp in partitions}


def logs_of(records: Sequence[KafkaRecord]) -> dict[TopicPartitionKey, list[KafkaRecord]]:
    result: dict[TopicPartitionKey, list[KafkaRecord]] = {}
    for r in records:
        result.setdefault((r.topic, r.partition), []).append(r)
    return result


def names(store: MemoryStore) -> Mapping[object, object]:
    return {key[1][0]: row["name"] for key, row in store.rows.items()}


@dataclass
class FetchedStream:
    """What a continuous consumer that fell behind has already fetched: records and the
    partition ends reported after each fetch, delivered in that order (a None: the
    consumer has nothing fetched at that moment); after them nothing, and ``stop`` is set
    (the loop's run ends)."""

    events: list[KafkaRecord | PartitionEnd | None]
    stop: threading.Event = field(default_factory=threading.Event)

    def assign(self, partitions: Sequence[TopicPartitionKey], listener: AssignmentListener) -> None:
        listener.assigned(list(partitions))

    def poll(self, timeout: float) -> KafkaRecord | PartitionEnd | None:
        if self.events:
            return self.events.pop(0)
        self.stop.set()
        return None

    def seek(self, topic: str, partition: int, offset: int | None) -> None:
        raise AssertionError("no conflict expected")

    def last_stable_offsets(
        self, partitions: Sequence[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, int]:
        raise AssertionError("a continuous loop has no targets")


def fetched_in_rounds(rounds: int, partitions: int) -> list[KafkaRecord | PartitionEnd]:
    """``rounds`` fetches of one record per partition, each round ending every partition."""
    events: list[KafkaRecord | PartitionEnd] = []
    for offset in range(rounds):
        for p in range(partitions):
            events.append(record(offset, p * 1000 + offset, f"n{offset}", p))
            events.append(PartitionEnd("t", p, offset + 1))
    return events
