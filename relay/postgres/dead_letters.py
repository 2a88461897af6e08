"""The dead-letter tables (``outbox_dead_letters``, ``mirror_dead_letters``) for
``relay dead-letters``: listing, reading, discarding, and replaying dead letters in a
transaction that holds their row locks (so two replays of one cannot both succeed):

- outbox: a key's dead letters together (:mod:`relay.postgres.outbox_replay`);
- mirror: the record's row operations run with the mirror's own version-guarded
  statements (:class:`~relay.postgres.mirror_store.PostgresMirrorStore`) in a savepoint,
  and the dead letter is deleted.

A replay that is refused (by the caller's check, or by the database) keeps the dead letter
and stores the new error.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, Row, Table, TextClause, text
from sqlalchemy.exc import DBAPIError

from relay.mirroring.types import KafkaRecord, Op, RecordHeaders, ResolvedTable
from relay.postgres.engine import Database, driver_message, is_transient
from relay.postgres.mirror_store import PostgresMirrorStore
from relay.runtime.secrets import mask_text

Source = Literal["outbox", "mirror"]

_TABLES: Mapping[Source, str] = {"outbox": "outbox_dead_letters", "mirror": "mirror_dead_letters"}
_TOPIC = "(CAST(:topic AS text) IS NULL OR topic = CAST(:topic AS text))"
_GROUP = "(CAST(:group AS text) IS NULL OR consumer_group = CAST(:group AS text))"
_IDS = "(CAST(:ids AS bigint[]) IS NULL OR id = ANY(CAST(:ids AS bigint[])))"
_FILTERS: Mapping[Source, str] = {
    "outbox": f"{_IDS} AND {_TOPIC}",
    "mirror": f"{_IDS} AND {_TOPIC} AND {_GROUP}",
}
_LIST: Mapping[Source, TextClause] = {
    "outbox": text(
        "SELECT id, topic, partition, seq AS position, error, dead_lettered_at AS at, "
        f"NULL AS consumer_group, outbox_id FROM outbox_dead_letters WHERE {_FILTERS['outbox']} "
        "ORDER BY id LIMIT :limit"
    ),
    "mirror": text(
        'SELECT id, topic, partition, "offset" AS position, error, created_at AS at, '
        f"consumer_group, NULL AS outbox_id FROM mirror_dead_letters WHERE {_FILTERS['mirror']} "
        "ORDER BY id LIMIT :limit"
    ),
}
# --all replays in the order the records were first written: per key, their own order.
_ORDER: Mapping[Source, str] = {
    "outbox": "seq, id",  # seq: the order of the outbox, across relay partitions
    "mirror": 'consumer_group, topic, partition, "offset", id',
}
_ONE: Mapping[Source, str] = {
    "outbox": "SELECT id, outbox_id, partition, seq, topic, key, value, event_type, headers, "
    "created_at, error, dead_lettered_at FROM outbox_dead_letters WHERE id = :id",
    "mirror": 'SELECT id, consumer_group, topic, partition, "offset", key, value, headers, '
    "error, created_at, kafka_timestamp FROM mirror_dead_letters WHERE id = :id",
}


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """One dead letter in a listing."""

    id: int
    topic: str
    partition: int  # outbox: the relay partition; mirror: the Kafka partition
    position: int  # outbox: the row's seq; mirror: the record's offset
    error: str
    at: datetime  # when it became a dead letter
    group: str | None = None  # mirror: the consumer group
    outbox_id: int | None = None  # outbox: the row's id in the outbox


@dataclass(frozen=True, slots=True)
class OutboxDeadLetter:
    id: int
    outbox_id: int
    partition: int
    seq: int
    topic: str
    key: bytes | None
    value: bytes | None
    event_type: str | None
    headers: object  # the stored JSON as it is: it may be what made the row a dead letter
    created_at: datetime
    error: str
    dead_lettered_at: datetime


@dataclass(frozen=True, slots=True)
class MirrorDeadLetter:
    id: int
    group: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: RecordHeaders
    error: str
    created_at: datetime
    timestamp: datetime | None = None  # the record's Kafka timestamp; None before 0012

    def record(self) -> KafkaRecord:
        """The Kafka record as the mirror consumed it."""
        return KafkaRecord(
            self.topic,
            self.partition,
            self.offset,
            self.key,
            self.value,
            self.headers,
            timestamp_ms=None
            if self.timestamp is None
            else round(self.timestamp.timestamp() * 1000),
        )


@dataclass(frozen=True, slots=True)
class Replayed:
    """How one replay went: ``found`` False when the id is not (or no longer) a dead
    letter; ``error`` None when it was replayed and deleted, else why it was kept."""

    id: int
    found: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Selection:
    """Which dead letters: those of ``ids`` (None: all), of ``topic`` and, of the mirror's,
    of consumer group ``group`` when given."""

    ids: tuple[int, ...] | None = None
    topic: str | None = None
    group: str | None = None

    def params(self) -> dict[str, object]:
        ids = None if self.ids is None else list(self.ids)
        return {"ids": ids, "topic": self.topic, "group": self.group}


class DeadLetterTables:
    """Listing, reading and discarding the dead letters of ``outbox`` or ``mirror``."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def rows(
        self, source: Source, selection: Selection, limit: int | None = None
    ) -> list[DeadLetterRow]:
        """The selected dead letters, oldest first, at most ``limit``."""
        params = {**selection.params(), "limit": limit}
        with self._database.connect(f"reading {_TABLES[source]}") as c:
            found = c.execute(_LIST[source], params).all()
        return [
            DeadLetterRow(
                int(r.id),
                str(r.topic),
                int(r.partition),
                int(r.position),
                str(r.error),
                r.at,
                r.consumer_group,
                None if r.outbox_id is None else int(r.outbox_id),
            )
            for r in found
        ]

    def ids(self, source: Source, selection: Selection) -> list[int]:
        """The selected dead letters' ids, in the order their records were first written."""
        statement = text(
            f"SELECT id FROM {_TABLES[source]} WHERE {_FILTERS[source]} ORDER BY {_ORDER[source]}"
        )
        with self._database.connect(f"reading {_TABLES[source]}") as c:
            return [int(i) for i in c.execute(statement, selection.params()).scalars()]

    def outbox_letter(self, dead_letter_id: int) -> OutboxDeadLetter | None:
        with self._database.connect("reading outbox_dead_letters") as c:
            row = c.execute(text(_ONE["outbox"]), {"id": dead_letter_id}).one_or_none()
        return None if row is None else outbox_letter(row)

    def mirror_letter(self, dead_letter_id: int) -> MirrorDeadLetter | None:
        with self._database.connect("reading mirror_dead_letters") as c:
            row = c.execute(text(_ONE["mirror"]), {"id": dead_letter_id}).one_or_none()
        return None if row is None else _mirror_letter(row)

    def discard(self, source: Source, selection: Selection) -> list[int]:
        """Delete the selected dead letters; returns the ids deleted."""
        table = _TABLES[source]
        statement = text(f"DELETE FROM {table} WHERE {_FILTERS[source]} RETURNING id")
        with self._database.begin(f"deleting from {table}") as c:
            return sorted(int(i) for i in c.execute(statement, selection.params()).scalars())


class MirrorReplayer(PostgresMirrorStore):
    """The mirror's row statements for the mapped ``tables``, without a consumer group:
    a replay moves no stored offset."""

    def __init__(
        self,
        database: Database,
        tables: Sequence[ResolvedTable],
        reflected: Mapping[str, Table],
    ) -> None:
        super().__init__(database, "", tables, reflected)

    def replay(
        self,
        dead_letter_id: int,
        operations: Callable[[MirrorDeadLetter], Sequence[Op] | str],
    ) -> Replayed:
        """Apply the row operations ``operations`` gives for the dead letter (as the
        mirror applies them: an older version never overwrites a newer row) and delete
        it, in one transaction; a reason instead of operations, or the database refusing
        them, keeps it with that error."""
        with (
            self._database.errors(f"replaying mirror dead letter {dead_letter_id}"),
            self._database.engine.begin() as conn,
        ):
            row = locked(conn, "mirror", dead_letter_id)
            if row is None:
                return Replayed(dead_letter_id, found=False)
            found = operations(_mirror_letter(row))
            error = found if isinstance(found, str) else self._apply(conn, found)
            settle(conn, "mirror", dead_letter_id, error)
        return Replayed(dead_letter_id, True, error)

    def _apply(self, conn: Connection, ops: Sequence[Op]) -> str | None:
        try:
            with conn.begin_nested():
                self.run_operations(conn, ops)
        except DBAPIError as exc:
            if is_transient(exc):
                raise
            message = driver_message(exc)
            return f"database rejected the record{message.code}: {mask_text(message.first_line)}"
        return None


def locked(conn: Connection, source: Source, dead_letter_id: int) -> Row[Any] | None:
    statement = text(_ONE[source] + " FOR UPDATE")
    return conn.execute(statement, {"id": dead_letter_id}).one_or_none()


def settle(conn: Connection, source: Source, dead_letter_id: int, error: str | None) -> None:
    """Delete the replayed dead letter, or store why it was kept."""
    table = _TABLES[source]
    if error is None:
        conn.execute(text(f"DELETE FROM {table} WHERE id = :id"), {"id": dead_letter_id})
    else:
        conn.execute(
            text(f"UPDATE {table} SET error = :error WHERE id = :id"),
            {"id": dead_letter_id, "error": error.replace("\x00", "\\x00")},
        )


def outbox_letter(row: Row[Any]) -> OutboxDeadLetter:
    return OutboxDeadLetter(
        int(row.id),
        int(row.outbox_id),
        int(row.partition),
        int(row.seq),
        str(row.topic),
        row.key,
        row.value,
        row.event_type,
        row.headers,
        row.created_at,
        str(row.error),
        row.dead_lettered_at,
    )


def _mirror_letter(row: Row[Any]) -> MirrorDeadLetter:
    return MirrorDeadLetter(
        int(row.id),
        str(row.consumer_group),
        str(row.topic),
        int(row.partition),
        int(row.offset),
        row.key,
        row.value,
        record_headers(row.headers),
        str(row.error),
        row.created_at,
        row.kafka_timestamp,
    )


def record_headers(stored: object) -> RecordHeaders:
    """A mirror dead letter's headers column (``[{"name", "value" | "base64"}]``, as
    the mirror writes it) as the record's headers."""
    headers: list[tuple[str, bytes | None]] = []
    for header in stored if isinstance(stored, list) else ():
        if not isinstance(header, dict):
            continue
        name, value, encoded = header.get("name"), header.get("value"), header.get("base64")
        raw: bytes | None = None
        if isinstance(value, str):
            raw = value.encode("utf-8")
        elif isinstance(encoded, str):
            try:
                raw = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raw = None
        headers.append((str(name), raw))
    return tuple(headers)
