"""Setting a relay partition's published floor by hand (``relay positions set``).

The relay only ever raises the floor (:meth:`PostgresOutboxSource.record_published`, after
each Kafka commit); a position set by hand may be lower, and the floor follows it here and
nowhere else, so that the relay does not refuse the new position at start-up (I3,
docs/invariants.md).
"""

from __future__ import annotations

from sqlalchemy import text

from relay.postgres.engine import Database

_LOWER = text(
    "UPDATE outbox_published_floor SET position = :position, updated_at = now() "
    "WHERE partition = :partition AND position > :position"
)
_SET = text(
    """
    INSERT INTO outbox_published_floor AS f (partition, position) VALUES (:partition, :position)
    ON CONFLICT (partition) DO UPDATE SET position = excluded.position, updated_at = now()
    """
)


def set_published_floor(
    database: Database, partition: int, position: int, *, only_lower: bool = False
) -> None:
    """Set the partition's floor to ``position``, lower or higher; with ``only_lower``,
    only when it is above ``position`` (and never create it)."""
    params = {"partition": partition, "position": position}
    with database.begin("setting outbox_published_floor") as conn:
        conn.execute(_LOWER if only_lower else _SET, params)
