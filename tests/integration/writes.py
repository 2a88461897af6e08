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
    of every row then in the outbox."""
    engine = sa.create_engine(database_url, poolclass=NullPool)
    try:
        for start in range(0, len(events), per_transaction):
            with engine.begin() as conn:
                relay.publish_many(conn, events[start : start + per_transaction])
        with engine.connect() as conn:
            return {int(r[0]) for r in conn.execute(sa.text("SELECT id FROM outbox"))}
    finally:
        engine.dispose()


def write_events(database_url: str, topic: str, count: int, keys: int = 50) -> set[int]:
    """Commit ``count`` events over ``keys`` keys in transactions of 100; returns their ids."""
    return publish_events(
        database_url, [relay.Event(topic, f"key-{n % keys}", {"n": n}) for n in range(count)]
    )
