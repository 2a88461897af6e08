"""The freshness of mirrored tables (0010_mirror_freshness, docs/mirror.md "Freshness"):
the heartbeats a batch applied, which topics feed which table, and the view that
combines them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection

from relay.mirroring.mapping import TableMapping
from relay.mirroring.types import Decoded
from relay.postgres.engine import Database
from relay.runtime.heartbeat import Heartbeat

# Forward in time; back only in a replay (a heartbeat at or before the stored one's offset:
# the partition was set back, and the stored one counts only once passed again).
_STORE = sa.text(
    """
    INSERT INTO mirror_heartbeats AS h (consumer_group, topic, partition, source_database_id,
      relay_partition, relay_partitions, complete_through, heartbeat_offset)
    VALUES (:group, :topic, :partition, :database_id, :relay_partition, :relay_partitions,
      :complete_through, :offset)
    ON CONFLICT (consumer_group, topic, partition, source_database_id, relay_partition)
    DO UPDATE SET complete_through = excluded.complete_through,
      relay_partitions = excluded.relay_partitions,
      heartbeat_offset = excluded.heartbeat_offset, updated_at = now()
    WHERE h.complete_through < excluded.complete_through
       OR h.heartbeat_offset >= excluded.heartbeat_offset
    """
)
_FORGET_TABLES = sa.text(
    "DELETE FROM mirror_table_topics WHERE consumer_group = :group AND table_name = ANY(:tables)"
)
_TABLE_TOPIC = sa.text(
    "INSERT INTO mirror_table_topics (consumer_group, table_name, topic) "
    "VALUES (:group, :table, :topic)"
)
_FRESHNESS = sa.text(
    "SELECT table_name, complete_through, lag_s FROM relay_mirror_freshness "
    "WHERE consumer_group = :group ORDER BY table_name"
)


@dataclass(frozen=True, slots=True)
class Freshness:
    """A mirrored table of a group: every outbox event committed before
    ``complete_through`` is applied (None: not known, docs/mirror.md)."""

    table: str
    complete_through: datetime | None
    lag_s: float | None


def latest_heartbeats(items: Iterable[Decoded]) -> list[tuple[Heartbeat, int]]:
    """The latest heartbeat of each outbox database and relay partition among ``items``
    (records of one partition, in offset order), with its offset."""
    latest: dict[tuple[str, int], tuple[Heartbeat, int]] = {}
    for item in items:
        beat = item.heartbeat
        if beat is None:
            continue
        known = latest.get((beat.database_id, beat.relay_partition))
        if known is None or beat.complete_through_ms > known[0].complete_through_ms:
            latest[(beat.database_id, beat.relay_partition)] = (beat, item.record.offset)
    return list(latest.values())


def store_heartbeats(
    conn: Connection, group: str, topic: str, partition: int, items: Sequence[Decoded]
) -> None:
    """In the batch's transaction (with its offset, I4): the partition's latest heartbeats."""
    beats = latest_heartbeats(items)
    if beats:
        conn.execute(
            _STORE,
            [
                {
                    "group": group,
                    "topic": topic,
                    "partition": partition,
                    "database_id": beat.database_id,
                    "relay_partition": beat.relay_partition,
                    "relay_partitions": beat.relay_partitions,
                    "complete_through": beat.complete_through,
                    "offset": offset,
                }
                for beat, offset in beats
            ],
        )


def record_table_topics(database: Database, group: str, tables: Sequence[TableMapping]) -> None:
    """Which topics feed each of ``tables`` (the whole mapping's, not only the topics this
    instance mirrors), in place of what the group recorded for them before."""
    rows = [{"group": group, "table": t.table, "topic": top} for t in tables for top in t.topics]
    with database.begin("recording mirror_table_topics", retriable=True) as conn:
        conn.execute(_FORGET_TABLES, {"group": group, "tables": [t.table for t in tables]})
        if rows:
            conn.execute(_TABLE_TOPIC, rows)


def group_freshness(database: Database, group: str) -> list[Freshness]:
    """Every mirrored table of ``group`` in ``relay_mirror_freshness``."""
    with database.connect("reading relay_mirror_freshness", retriable=True) as conn:
        rows = conn.execute(_FRESHNESS, {"group": group}).all()
    return [Freshness(r.table_name, r.complete_through, r.lag_s) for r in rows]


def complete_through(database: Database, group: str, _: object = None) -> dict[str, float]:
    """Each table's complete-through time in seconds since the epoch, for the metrics
    (tables not known left out)."""
    found = group_freshness(database, group)
    return {f.table: f.complete_through.timestamp() for f in found if f.complete_through}
