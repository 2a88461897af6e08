"""Value types shared by the mirror's core and its edges."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from relay.mirroring.mapping import TableMapping
from relay.runtime.heartbeat import Heartbeat
from relay.runtime.summary import RunSummary

RecordHeaders = tuple[tuple[str, bytes | None], ...]
TopicPartitionKey = tuple[str, int]


@dataclass(slots=True)
class KafkaRecord:
    """One consumed record, as raw bytes.

    Never changed once made; not ``frozen`` only because a frozen dataclass's ``__init__``
    sets each field through ``object.__setattr__``, several times the cost, once per
    record consumed."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: RecordHeaders = ()
    timestamp_ms: int | None = None
    """The Kafka timestamp in milliseconds since the epoch; None: not available. Kept as
    the consumer gives it: the datetime (:attr:`timestamp`) is built only where a row or
    a dead letter needs it, not for every record consumed."""

    @property
    def timestamp(self) -> datetime | None:
        """The Kafka timestamp in UTC; None: not available."""
        ms = self.timestamp_ms
        return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name`` (None when absent or null)."""
        found: bytes | None = None
        for header_name, value in self.headers:
            if header_name == name:
                found = value
        return found


@dataclass(frozen=True, slots=True)
class PartitionEnd:
    """The consumer reached the end of what it may read: the last stable offset."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class TopicIdentity:
    """A Kafka topic as it is now: its id (Kafka's base64 form, as ``kafka-topics.sh``
    shows it) and its partition count."""

    topic_id: str
    partitions: int


@dataclass(frozen=True, slots=True)
class StoredOffset:
    """A partition's row in ``mirror_offsets``: the next offset to apply, and the topic id
    and partition count of the topic it was taken from (None: stored before they were
    recorded, migration 0008_mirror_topic_id)."""

    next_offset: int
    topic_id: str | None = None
    partitions: int | None = None


class ColumnKind(enum.Enum):
    """How a JSON value (or key text) is checked and converted for a column's DB type."""

    INTEGER = "integer"
    NUMERIC = "numeric"
    FLOAT = "float"
    TEXT = "text"
    BOOLEAN = "boolean"
    JSON = "json"
    TIMESTAMP = "timestamp"
    TIMESTAMPTZ = "timestamptz"
    DATE = "date"
    UUID = "uuid"
    BYTES = "bytes"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class ResolvedTable:
    """A table mapping checked against the database, with each column's kind."""

    mapping: TableMapping
    kinds: Mapping[str, ColumnKind] = field(default_factory=dict)

    @property
    def table(self) -> str:
        return self.mapping.table

    def kind(self, column: str) -> ColumnKind:
        return self.kinds.get(column, ColumnKind.OTHER)


@dataclass(slots=True)
class Upsert:
    """Insert the row, or update it when its stored version is lower. Never changed once
    made (not ``frozen``: see :class:`KafkaRecord`)."""

    table: str
    row: Mapping[str, object]


@dataclass(slots=True)
class Delete:
    """Delete the row with this key if its version is at most ``version``
    (unconditionally when ``version`` is None); in an scd2 table, close the key's current
    version at ``at`` instead. Never changed once made (not ``frozen``: see
    :class:`KafkaRecord`)."""

    table: str
    key: Mapping[str, object]
    version: int | None
    at: datetime | None = None


@dataclass(slots=True)
class Append:
    """Insert the row unless one with the same unique key exists (a changelog's row).
    Never changed once made (not ``frozen``: see :class:`KafkaRecord`)."""

    table: str
    row: Mapping[str, object]


Op = Upsert | Delete | Append


@dataclass(slots=True)
class Decoded:
    """What one record means: row operations, a dead-letter reason, a heartbeat of the
    outbox relay (stored, never applied to a table), or nothing (no mapped table takes
    its event type). Never changed once made (not ``frozen``: see :class:`KafkaRecord`)."""

    record: KafkaRecord
    ops: tuple[Op, ...] = ()
    error: str | None = None
    skipped_tombstone: str | None = None
    """Why a tombstone was not applied to (some of) its tables: never silent."""
    heartbeat: Heartbeat | None = None
    unmapped: tuple[tuple[str, str, str], ...] = ()
    """(table, field, the ALTER TABLE to run) of registry-format fields no column reads."""

    @property
    def skipped(self) -> bool:
        return not self.ops and self.error is None and self.heartbeat is None


@dataclass(frozen=True, slots=True)
class Batch:
    """Consecutive records of one Kafka partition, applied in one DB transaction.

    ``expected`` is the stored next offset the batch starts from (None: no row stored
    yet); ``next_offset`` is what the transaction stores, past the last record and past
    any transaction markers or aborted records the consumer skipped."""

    topic: str
    partition: int
    expected: int | None
    next_offset: int
    items: tuple[Decoded, ...]
    waited: int | None = None
    """None: a record the database refuses with an error that may heal rolls the batch
    back (RecordMayHealError). A number: the batch was rolled back that many times for
    such records, enough: they are dead-lettered like any refused record."""
    identity: TopicIdentity | None = None
    """The topic the records were read from, checked after they were fetched: the
    compare-and-set also requires a stored offset of this topic id (or of none) and
    records it with the partition count. None: not checked (the core's unit tests)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    record: KafkaRecord
    error: str


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: int
    skipped: int
    dead_letters: tuple[DeadLetter, ...] = ()
    skipped_tombstones: tuple[tuple[int, str], ...] = ()  # (offset, why)


@dataclass(slots=True)
class PartitionStats:
    """What a run did in one Kafka partition."""

    topic: str
    partition: int
    applied: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    conflicts: int = 0
    skipped_tombstones: int = 0
    next_offset: int | None = None

    def count(self, result: ApplyResult, next_offset: int) -> None:
        """Add an applied batch's result; the partition continues at ``next_offset``."""
        self.applied += result.applied
        self.skipped += result.skipped
        self.dead_lettered += len(result.dead_letters)
        self.skipped_tombstones += len(result.skipped_tombstones)
        self.next_offset = next_offset


MirrorSummary = RunSummary[PartitionStats]


@dataclass(frozen=True, slots=True)
class LagRow:
    topic: str
    partition: int
    next_offset: int | None  # None: nothing applied yet
    last_stable_offset: int
    # How old the oldest record not yet applied is (its Kafka timestamp to now); 0 when
    # caught up or only transaction markers are left; None: not asked, or not in the log.
    lag_s: float | None = None

    @property
    def lag(self) -> int:
        """Records (and transaction markers) committed in Kafka but not yet applied."""
        return max(0, self.last_stable_offset - (self.next_offset or 0))


def with_lag_seconds(
    rows: Sequence[LagRow], found: Mapping[TopicPartitionKey, int | None], now: float
) -> list[LagRow]:
    """``rows`` with ``lag_s``: ``now`` (seconds since the epoch) minus ``found``, the
    Kafka timestamp (ms) of the first record at or after the stored offset of each
    lagging partition (None: no record before the end; left out: not in the log)."""
    result = []
    for row in rows:
        tp = (row.topic, row.partition)
        age: float | None = 0.0  # caught up, or only transaction markers left
        if row.lag > 0 and tp not in found:
            age = None  # the stored offset is not in the log any more
        elif row.lag > 0 and (ms := found[tp]) is not None:
            age = max(0.0, now - ms / 1000)
        result.append(replace(row, lag_s=age))
    return result
