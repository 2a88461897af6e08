"""Writing test events through the public write API."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay


def write_events(database_url: str, topic: str, count: int, keys: int = 50) -> set[int]:
    """Commit ``count`` events over ``keys`` keys in transactions of 100; returns their ids."""
    engine = sa.create_engine(database_url, poolclass=NullPool)
    try:
        for start in range(0, count, 100):
            with engine.begin() as conn:
                relay.publish_many(
                    conn,
                    [
                        relay.Event(topic, f"key-{n % keys}", {"n": n})
                        for n in range(start, min(count, start + 100))
                    ],
                )
        with engine.connect() as conn:
            return {int(r[0]) for r in conn.execute(sa.text("SELECT id FROM outbox"))}
    finally:
        engine.dispose()
