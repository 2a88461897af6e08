"""Reading committed outbox rows of a relay partition, and housekeeping."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, text

from relay.errors import InvalidEventError
from relay.postgres.engine import Database
from relay.postgres.outbox_holds import CLEAR_STALL, DEAD_LETTER, RECORD_STALL, with_followed
from relay.postgres.outbox_horizon import Horizons
from relay.postgres.prepared import DriverStatement
from relay.publishing.events import decode_headers_json
from relay.publishing.types import Headers, OutboxIdentity, OutboxRecord, Settled

# Committed rows of a relay partition in position order (I2, docs/invariants.md): a
# marker of outbox_commits lists its rows' ids in position order from first_seq, and their
# transactions' commit times (none in markers drawn before 0017: the marker's). The
# markers read are those whose positions before them number fewer than ``limit`` (in
# position order, from the pkey), so a fetch reads the transactions it returns rows of,
# whatever the plan, not the backlog. Each row ends with the position it reaches: its own;
# a marker none of whose rows are left in range (published, dead-lettered) yields one row
# of NULLs with its last position, so that the reader moves past it.
_FETCH = DriverStatement(
    """
    WITH markers AS (
      SELECT c.*, sum(c.positions) OVER (ORDER BY c.last_seq) - c.positions AS before
      FROM (
        SELECT ids, times, first_seq, last_seq, committed_at,
               greatest(first_seq, :after + 1) AS start,
               least(last_seq, :up_to) - greatest(first_seq, :after + 1) + 1 AS positions
        FROM outbox_commits
        WHERE partition = :partition AND last_seq > :after AND first_seq <= :up_to
        ORDER BY last_seq
        LIMIT :limit
      ) c
    )
    SELECT o.id, m.start + o.k - 1, o.topic, o.key, o.value, o.event_type, o.headers::text,
           (extract(epoch FROM o.created_at) * 1000)::int8,
           (extract(epoch FROM coalesce(o.at, m.committed_at)) * 1000)::int8,
           CASE WHEN o.id IS NULL THEN least(m.last_seq, :up_to) ELSE m.start + o.k - 1 END
    FROM markers m
    LEFT JOIN LATERAL (
      SELECT u.k, u.at, o.id, o.topic, o.key, o.value, o.event_type, o.headers, o.created_at
      FROM unnest(m.ids[m.start - m.first_seq + 1 : m.start - m.first_seq + m.positions],
                  m.times[m.start - m.first_seq + 1 : m.start - m.first_seq + m.positions])
           WITH ORDINALITY u(id, at, k)
      JOIN outbox o ON o.id = u.id
      ORDER BY u.k
      LIMIT :limit
    ) o ON true
    WHERE m.before < :limit
    ORDER BY m.last_seq, o.k
    LIMIT :limit
    """
)
# Rows sequenced before 0007_commit_markers carry their seq, below every marker's
# positions; none are written any more, so a partition stops asking once it has none left.
_FETCH_LEGACY = text(
    """
    SELECT o.id, o.seq, o.topic, o.key, o.value, o.event_type, o.headers::text,
           (extract(epoch FROM o.created_at) * 1000)::int8, NULL::int8, o.seq
    FROM outbox o
    WHERE o.partition = :partition AND o.seq > :after AND o.seq <= :up_to
    ORDER BY o.seq
    LIMIT :limit
    """
)
_HAS_LEGACY = text(
    "SELECT EXISTS (SELECT FROM outbox WHERE partition = :partition AND seq > :after)"
)
_HIGH_WATER = text(
    """
    SELECT greatest(
      (SELECT coalesce(max(seq), 0) FROM outbox WHERE partition = :partition AND seq > 0),
      (SELECT coalesce(max(last_seq), 0) FROM outbox_commits
       WHERE partition = :partition AND first_seq <= :up_to))
    """
)
# Published rows up to :up_to, and the markers all of whose positions are published: a
# marker left holds the rows above the last clean-up's position (at most MARKER_ROWS of
# 0017), so the rows below it that are gone already cost an index probe each, not a scan.
# Nothing is assumed about earlier clean-ups: one whose commit a database crash took back
# (synchronous_commit off) leaves its rows and markers both.
_DELETE = text(
    """
    WITH gone AS (
      DELETE FROM outbox o
      USING (
        SELECT u.id FROM outbox_commits m
        CROSS JOIN LATERAL unnest(m.ids[1 : least(m.last_seq, :up_to) - m.first_seq + 1]) u(id)
        WHERE m.partition = :partition AND m.first_seq <= :up_to
      ) d
      WHERE o.id = d.id
      RETURNING 1
    ), done AS (
      DELETE FROM outbox_commits WHERE partition = :partition AND last_seq <= :up_to
    )
    SELECT count(*) FROM gone
    """
)
_DELETE_LEGACY = text("DELETE FROM outbox WHERE partition = :partition AND seq <= :up_to")
_RAISE_FLOOR = text(
    """
    INSERT INTO outbox_published_floor AS f (partition, position) VALUES (:partition, :position)
    ON CONFLICT (partition) DO UPDATE SET position = excluded.position, updated_at = now()
    WHERE f.position < excluded.position
    """
)
_FLOOR = text("SELECT position FROM outbox_published_floor WHERE partition = :partition")
_IDENTITY = text("SELECT database_id::text, default_prefix FROM outbox_identity")
# What committed draws placed: a position the relay published was drawn by a committed draw
# (it reads no other), so no draw is needed here (a backlog's would hold every partition's
# start-up).
_LAST_ASSIGNED = text("SELECT drawn FROM outbox_draws")
_COUNT_CHANGE_PENDING = text(
    "SELECT barrier IS NOT NULL AND outbox_unpublished_up_to(barrier) FROM outbox_settings"
)

log = logging.getLogger(__name__)


class PostgresOutboxSource:
    """Implements :class:`relay.publishing.ports.OutboxSource` on the ``outbox`` table."""

    def __init__(self, database: Database, *, settling: bool = False, drawing: bool = True) -> None:
        """``settling``: learn what each horizon vouches for (:meth:`settled`); without,
        :meth:`settled` stays None. ``drawing``: draw the positions of what has committed
        before each horizon read (see :class:`Horizons`)."""
        self._database = database
        self._horizons = Horizons(settling=settling, drawing=drawing)
        self._without_legacy: set[int] = set()  # partitions with no row of a seq of its own

    @contextmanager
    def _connection(self, doing: str, *, begin: bool = False) -> Iterator[Connection]:
        """A connection whose transient database errors become RetriableError: in a
        transaction with ``begin``, else in autocommit (each statement its own
        transaction, with no BEGIN and ROLLBACK around it: a fetch took half the time)."""
        with self._database.errors(doing, retriable=True):
            if begin:
                with self._database.engine.begin() as conn:
                    yield conn
            else:
                with self._database.engine.connect() as conn:
                    yield conn.execution_options(isolation_level="AUTOCOMMIT")

    def _horizon(self, conn: Connection, partition: int) -> int:
        return self._horizons.read(conn, partition)

    def settled(self, partition: int) -> Settled | None:
        return self._horizons.settled.get(partition)

    def high_water(self, partition: int) -> int:
        with self._connection("reading the outbox") as conn:
            up_to = self._horizon(conn, partition)
            found = conn.execute(_HIGH_WATER, {"partition": partition, "up_to": up_to})
            return int(found.scalar_one())

    def count_change_pending(self) -> bool:
        with self._connection("reading outbox_settings") as conn:
            return bool(conn.execute(_COUNT_CHANGE_PENDING).scalar_one())

    def fetch(
        self, partition: int, after_seq: int, limit: int, up_to_seq: int | None = None
    ) -> Sequence[OutboxRecord]:
        with self._connection("reading the outbox") as conn:
            settled = self._horizon(conn, partition)
            up_to = settled if up_to_seq is None else min(settled, up_to_seq)
            after = after_seq
            while after < up_to:
                rows = self._read(conn, partition, after, up_to, limit)
                records = self._records(partition, rows)
                if records:
                    return with_followed(conn, records)
                if not rows:
                    break
                # Only rows just dead-lettered, or positions whose rows are gone: read on
                # from the last position seen rather than end the batch empty.
                after = max(int(row[-1]) for row in rows)
        if up_to == settled:  # nothing is left up to the horizon
            self._horizons.drained(partition, after_seq)
        return []

    def _read(
        self, conn: Connection, partition: int, after: int, up_to: int, limit: int
    ) -> list[tuple[Any, ...]]:
        """Up to ``limit`` rows, position order: (id, position, topic, key, value,
        event type, headers JSON, created_at ms, committed_at ms (None: not known),
        position reached); id None for a marker whose rows are gone."""
        params = {"partition": partition, "after": after, "up_to": up_to, "limit": limit}
        rows: list[tuple[Any, ...]] = []
        if partition not in self._without_legacy:
            rows = [tuple(row) for row in conn.execute(_FETCH_LEGACY, params)]
            if not rows and not conn.execute(_HAS_LEGACY, params).scalar_one():
                self._without_legacy.add(partition)
        if len(rows) < limit:
            rows += _FETCH.rows(conn, {**params, "limit": limit - len(rows)})
        return rows

    def _records(self, partition: int, rows: list[tuple[Any, ...]]) -> list[OutboxRecord]:
        """The rows as records; unreadable ones are dead-lettered."""
        records: list[OutboxRecord] = []
        unreadable: dict[int, str] = {}
        append = records.append
        for row in rows:
            outbox_id, seq, topic, key, value, event_type, headers_json, at_ms, done_ms, _ = row
            if outbox_id is None:
                continue
            try:
                headers: Headers = decode_headers_json(headers_json)
            except InvalidEventError as exc:
                unreadable[outbox_id] = str(exc)
                continue
            append(
                OutboxRecord(
                    outbox_id,
                    partition,
                    seq,
                    topic,
                    key,
                    value,
                    event_type,
                    headers,
                    at_ms,
                    committed_ms=done_ms or 0,
                )
            )
        if unreadable:
            self._dead_letter_unreadable(partition, unreadable)
        return records

    def _dead_letter_unreadable(self, partition: int, reasons: dict[int, str]) -> None:
        """Rows that can never become a Kafka record leave the outbox for the dead-letter
        table, each with its reason, in one transaction (I5); the relay goes on."""
        params = [
            {"partition": partition, "ids": [outbox_id], "error": reason}
            for outbox_id, reason in reasons.items()
        ]
        with self._connection("moving rows to outbox_dead_letters", begin=True) as conn:
            conn.execute(DEAD_LETTER, params)
        log.error(
            "relay partition %d: moved %d outbox row(s) that cannot become Kafka records "
            "to outbox_dead_letters: %s",
            partition,
            len(reasons),
            "; ".join(f"{i}: {r}" for i, r in sorted(reasons.items())),
        )

    def last_assigned_seq(self) -> int:
        with self._connection("reading the positions drawn") as conn:
            return int(conn.execute(_LAST_ASSIGNED).scalar_one())

    def dead_letter(self, partition: int, outbox_ids: Sequence[int], error: str) -> int:
        params = {"partition": partition, "ids": list(outbox_ids), "error": error}
        with self._connection("moving rows to outbox_dead_letters", begin=True) as conn:
            result = conn.execute(DEAD_LETTER, params)
        return int(result.rowcount)

    def record_stall(
        self, partition: int, outbox_id: int | None, topic: str | None, reason: str
    ) -> None:
        params = {"partition": partition, "outbox_id": outbox_id, "topic": topic}
        with self._connection("recording a stall", begin=True) as conn:
            conn.execute(RECORD_STALL, {**params, "reason": reason.replace("\x00", "")})

    def clear_stall(self, partition: int) -> None:
        with self._connection("clearing a stall", begin=True) as conn:
            conn.execute(CLEAR_STALL, {"partition": partition})

    def identity(self) -> OutboxIdentity:
        with self._connection("reading outbox_identity") as conn:
            row = conn.execute(_IDENTITY).one()
        return OutboxIdentity(row.database_id, row.default_prefix)

    def published_floor(self, partition: int) -> int:
        with self._connection("reading outbox_published_floor") as conn:
            found = conn.execute(_FLOOR, {"partition": partition}).scalar_one_or_none()
        return int(found) if found is not None else 0

    def record_published(self, partition: int, position: int, *, delete_rows: bool) -> int:
        if position <= 0:
            return 0
        params = {"partition": partition, "position": position, "up_to": position}
        with self._connection("recording what was published", begin=True) as conn:
            conn.execute(_RAISE_FLOOR, params)
            if not delete_rows:
                return 0
            deleted = int(conn.execute(_DELETE, params).scalar_one())
            deleted += int(conn.execute(_DELETE_LEGACY, params).rowcount)
        return deleted
