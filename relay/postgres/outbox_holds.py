"""The outbox's dead letters and stalls, as the relay writes them: rows moved to
``outbox_dead_letters``, the dead letters a batch's keys follow (I2: a key's later rows
never overtake its dead letter), and ``outbox_stalls``, what holds a relay partition while
its batch is retried (``relay status``; migration ``0011_outbox_stalls``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, text

from relay.postgres.prepared import DriverStatement
from relay.publishing.types import OutboxRecord

# The given rows of the partition, each with its position: its seq (rows sequenced before
# 0007_commit_markers), else its place in its marker's ids; rows of other partitions, or
# not drawn yet, are not moved.
DEAD_LETTER = text(
    """
    WITH found AS (
      SELECT o.id, coalesce(o.seq, (
               SELECT m.first_seq + array_position(m.ids, o.id) - 1 FROM outbox_commits m
               WHERE m.partition = :partition AND o.id BETWEEN m.first_id AND m.last_id
                 AND o.id = ANY(m.ids))) AS seq
      FROM outbox o
      WHERE o.id = ANY(:ids) AND (o.partition IS NULL OR o.partition = :partition)
    ), moved AS (
      DELETE FROM outbox o USING found f
      WHERE o.id = f.id AND f.seq IS NOT NULL
      RETURNING o.id, f.seq, o.topic, o.key, o.value, o.event_type, o.headers, o.created_at
    )
    INSERT INTO outbox_dead_letters
      (outbox_id, partition, seq, topic, key, value, event_type, headers, created_at, error)
    SELECT d.id, :partition, d.seq, d.topic, d.key, d.value, d.event_type, d.headers,
           d.created_at, :error
    FROM moved d
    """
)
# The first dead letter of each key (any relay partition: a key keeps its order across a
# change of the partition count), from the partial index outbox_dead_letters_key: of every
# key while they are few (usually none: one probe of an empty index), else of the batch's.
_FOLLOWED_ALL = DriverStatement(
    """
    SELECT DISTINCT ON (key) key, seq, id FROM outbox_dead_letters
    WHERE key IS NOT NULL ORDER BY key, seq, id LIMIT :limit
    """
)
_FOLLOWED = text(
    """
    SELECT DISTINCT ON (d.key) d.key, d.seq, d.id
    FROM unnest(CAST(:keys AS bytea[])) k(key) JOIN outbox_dead_letters d ON d.key = k.key
    ORDER BY d.key, d.seq, d.id
    """
)
FEW_KEYS = 10_000
RECORD_STALL = text(
    """
    INSERT INTO outbox_stalls AS s (partition, outbox_id, topic, reason)
    VALUES (:partition, :outbox_id, :topic, :reason)
    ON CONFLICT (partition) DO UPDATE SET
      since = CASE WHEN s.outbox_id IS NOT DISTINCT FROM excluded.outbox_id THEN s.since
                   ELSE now() END,
      outbox_id = excluded.outbox_id, topic = excluded.topic, reason = excluded.reason
    """
)
CLEAR_STALL = text("DELETE FROM outbox_stalls WHERE partition = :partition")
STALLS = text(
    """
    SELECT partition, outbox_id, topic, reason, since FROM outbox_stalls
    WHERE partition = ANY(CAST(:partitions AS integer[]))
    """
)


def with_followed(conn: Connection, records: list[OutboxRecord]) -> list[OutboxRecord]:
    """``records``, those behind a dead letter of their key naming the key's first
    (``follows``)."""
    keys = {r.key for r in records if r.key is not None}
    if not keys:
        return records
    rows: Sequence[tuple[Any, ...]] = _FOLLOWED_ALL.rows(conn, {"limit": FEW_KEYS + 1})
    if len(rows) > FEW_KEYS:
        rows = conn.execute(_FOLLOWED, {"keys": list(keys)}).tuples().all()
    found = {bytes(key): (int(seq), int(letter)) for key, seq, letter in rows}
    if not found:
        return records
    return [
        replace(r, follows=first[1])
        if r.key is not None and (first := found.get(r.key)) is not None and r.seq > first[0]
        else r
        for r in records
    ]


def stall_line(outbox_id: int | None, topic: str | None, reason: str, since: str) -> str:
    """How ``relay status`` names what holds a partition."""
    if outbox_id is None:
        return f"retrying since {since}: {reason}"
    return f"outbox row {outbox_id} (topic {topic}) since {since}: {reason}"
