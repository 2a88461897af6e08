"""Writing test events through the public write API."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay


def publish_events(
    database_url: str, events: Sequence[relay.Event], per_transaction: int = 100
) -> set[int]:
    """Commit ``events`` in order, in transactions of ``per_transaction``; returns the ids
    of their rows (read in each writing transaction: a running relay may have published
    and deleted them by the time the writing ends)."""
    engine = sa.create_engine(database_url, poolclass=NullPool)
    ids: set[int] = set()
    try:
        for start in range(0, len(events), per_transaction):
            with engine.begin() as conn:
                relay.publish_many(conn, events[start : start + per_transaction])
                ids.update(int(i) for i in conn.execute(_WRITTEN_HERE).scalars())
        return ids
    finally:
        engine.dispose()


# The outbox rows that the current transaction inserted.
_WRITTEN_HERE = sa.text("SELECT id FROM outbox WHERE xmin = pg_current_xact_id()::xid")


def write_events(database_url: str, topic: str, count: int, keys: int = 50) -> set[int]:
    """Commit ``count`` events over ``keys`` keys in transactions of 100; returns their ids."""
    return publish_events(
        database_url, [relay.Event(topic, f"key-{n % keys}", {"n": n}) for n in range(count)]
    )
