"""Reading committed outbox rows of a relay partition, and housekeeping."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, text

from relay.errors import ConfigurationError, InvalidEventError
from relay.postgres.engine import database_errors
from relay.publishing.events import decode_headers
from relay.publishing.types import OutboxIdentity, OutboxRecord
from relay.runtime.secrets import Secret

_FETCH = text(
    """
    SELECT id, partition, seq, topic, key, value, event_type, headers
    FROM outbox
    WHERE partition = :partition AND seq > :after AND seq <= :up_to
    ORDER BY seq
    LIMIT :limit
    """
)
_HIGH_WATER = text("SELECT coalesce(max(seq), 0) FROM outbox WHERE partition = :partition")
_DELETE = text("DELETE FROM outbox WHERE partition = :partition AND seq <= :up_to")
_RAISE_FLOOR = text(
    """
    INSERT INTO outbox_published_floor AS f (partition, position) VALUES (:partition, :position)
    ON CONFLICT (partition) DO UPDATE SET position = excluded.position, updated_at = now()
    WHERE f.position < excluded.position
    """
)
_FLOOR = text("SELECT position FROM outbox_published_floor WHERE partition = :partition")
_IDENTITY = text("SELECT database_id::text, default_prefix FROM outbox_identity")
_LAST_ASSIGNED = text("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_seq")
_DEAD_LETTER = text(
    """
    WITH moved AS (
      DELETE FROM outbox WHERE partition = :partition AND id = ANY(:ids)
      RETURNING id, partition, seq, topic, key, value, event_type, headers, created_at
    )
    INSERT INTO outbox_dead_letters
      (outbox_id, partition, seq, topic, key, value, event_type, headers, created_at, error)
    SELECT id, partition, seq, topic, key, value, event_type, headers, created_at, :error
    FROM moved
    """
)
_PARTITIONS = text("SELECT partitions FROM outbox_settings")
_MAX_SEQ = 2**63 - 1

log = logging.getLogger(__name__)


class PostgresOutboxSource:
    """Implements :class:`relay.publishing.ports.OutboxSource` on the ``outbox`` table."""

    def __init__(self, engine: Engine, url: Secret) -> None:
        self._engine = engine
        self._url = url

    @contextmanager
    def _connection(self, doing: str, *, begin: bool = False) -> Iterator[Connection]:
        """A connection (in a transaction with ``begin``) whose transient database errors
        become RetriableError."""
        with (
            database_errors(self._url, doing, retriable=True),
            self._engine.begin() if begin else self._engine.connect() as conn,
        ):
            yield conn

    def high_water(self, partition: int) -> int:
        with self._connection("reading the outbox") as conn:
            return int(conn.execute(_HIGH_WATER, {"partition": partition}).scalar_one())

    def fetch(
        self, partition: int, after_seq: int, limit: int, up_to_seq: int | None = None
    ) -> Sequence[OutboxRecord]:
        params = {
            "partition": partition,
            "after": after_seq,
            "up_to": _MAX_SEQ if up_to_seq is None else up_to_seq,
            "limit": limit,
        }
        with self._connection("reading the outbox") as conn:
            rows = conn.execute(_FETCH, params).all()
        records: list[OutboxRecord] = []
        unreadable: dict[int, str] = {}
        for row in rows:
            try:
                headers = decode_headers(row.headers)
            except InvalidEventError as exc:
                unreadable[row.id] = str(exc)
                continue
            records.append(
                OutboxRecord(
                    id=row.id,
                    partition=row.partition,
                    seq=row.seq,
                    topic=row.topic,
                    key=row.key,
                    value=row.value,
                    event_type=row.event_type,
                    headers=headers,
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
            conn.execute(_DEAD_LETTER, params)
        log.error(
            "relay partition %d: moved %d outbox row(s) that cannot become Kafka records "
            "to outbox_dead_letters: %s",
            partition,
            len(reasons),
            "; ".join(f"{i}: {r}" for i, r in sorted(reasons.items())),
        )

    def last_assigned_seq(self) -> int:
        with self._connection("reading outbox_seq") as conn:
            return int(conn.execute(_LAST_ASSIGNED).scalar_one())

    def dead_letter(self, partition: int, outbox_ids: Sequence[int], error: str) -> int:
        params = {"partition": partition, "ids": list(outbox_ids), "error": error}
        with self._connection("moving rows to outbox_dead_letters", begin=True) as conn:
            result = conn.execute(_DEAD_LETTER, params)
        return int(result.rowcount)

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
            return int(conn.execute(_DELETE, params).rowcount)


def relay_partitions(engine: Engine, url: Secret) -> int:
    """How many relay partitions the outbox has (outbox_settings)."""
    with database_errors(url, "reading outbox_settings"), engine.connect() as conn:
        return int(conn.execute(_PARTITIONS).scalar_one())


def stranded_rows(engine: Engine, url: Secret, partitions: int) -> int:
    """Rows in relay partitions at or beyond ``partitions``: they would never be
    published (the count was lowered past the guard, e.g. by an older release)."""
    with database_errors(url, "reading the outbox"), engine.connect() as conn:
        found = conn.execute(
            text("SELECT count(*) FROM outbox WHERE partition >= :n"), {"n": partitions}
        )
        return int(found.scalar_one())


def change_partition_count(engine: Engine, url: Secret, partitions: int) -> int:
    """Set ``outbox_settings.partitions``; the database refuses while rows wait to be
    published (``outbox_partition_count_guard``). Returns the count before."""
    if not 1 <= partitions <= 4096:
        raise ConfigurationError(f"the relay partition count must be 1..4096, got {partitions}")
    with database_errors(url, "changing the relay partition count"), engine.begin() as conn:
        before = int(
            conn.execute(text("SELECT partitions FROM outbox_settings FOR UPDATE")).scalar_one()
        )
        conn.execute(text("UPDATE outbox_settings SET partitions = :n"), {"n": partitions})
    return before
