"""The write API: add events to the caller's own database transaction.

>>> with Session(engine) as session, session.begin():
...     session.add(Order(id=42, total=99))
...     relay.publish(session, "orders", key="order-42", value={"id": 42, "total": 99},
...                   event_type="OrderPlaced")

The event is an ``INSERT`` through the caller's session or connection, so it commits or
rolls back together with the business rows (I1, docs/invariants.md). Nothing is sent to Kafka
here; the relay publishes the row after it commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from relay.postgres.schema import outbox
from relay.publishing.events import Event, HeadersLike, KeyLike, outbox_row


def publish_many(bind: Session | Connection, events: Iterable[Event]) -> int:
    """Add ``events`` to the transaction of ``bind``, in order. Returns how many."""
    rows = [outbox_row(event) for event in events]
    if not rows:
        return 0
    if not isinstance(bind, Session | Connection):
        raise TypeError(
            "publish needs a SQLAlchemy Session or Connection (the caller's transaction), "
            f"not {type(bind).__name__}"
        )
    bind.execute(outbox.insert(), rows)
    return len(rows)


def publish(
    bind: Session | Connection,
    topic: str,
    key: KeyLike,
    value: Any,
    headers: HeadersLike | None = None,
    *,
    event_type: str | None = None,
) -> None:
    """Add one event to the transaction of ``bind`` (an ORM Session or a Core Connection).

    ``key`` decides the relay partition and the Kafka partition; events of one key are
    published in the order their transactions committed. ``value`` may be bytes, None (a
    tombstone) or any JSON-serialisable object.
    """
    publish_many(bind, [Event(topic, key, value, headers, event_type)])
