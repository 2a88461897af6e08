"""The write API: add events to the caller's own database transaction.

>>> with Session(engine) as session, session.begin():
...     session.add(Order(id=42, total=99))
...     relay.publish(session, "orders", key="order-42", value={"id": 42, "total": 99},
...                   event_type="OrderPlaced")

The event is an ``INSERT`` through the caller's session or connection, so it commits or
rolls back together with the business rows (invariant I1). Nothing is sent to Kafka
here; the relay publishes the row after it commits.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from relay.errors import RelayError
from relay.schema import outbox

TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
RESERVED_HEADERS = frozenset({"outbox-id", "outbox-seq", "outbox-partition", "event-type"})

KeyLike = str | bytes | None
HeaderValue = str | bytes
HeadersLike = Mapping[str, HeaderValue] | Iterable[tuple[str, HeaderValue]]


class InvalidEventError(RelayError, ValueError):
    """An event cannot be written to the outbox as given."""


@dataclass(frozen=True, slots=True)
class Event:
    """One event for :func:`publish_many`."""

    topic: str
    key: KeyLike
    value: Any
    headers: HeadersLike | None = None
    event_type: str | None = None


def encode_key(key: KeyLike) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    raise InvalidEventError(f"event key must be str, bytes or None, not {type(key).__name__}")


def encode_value(value: Any) -> bytes | None:
    """bytes pass through, None is a tombstone, anything else is serialised as JSON."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidEventError(
            f"event value is neither bytes nor JSON-serialisable: {exc}"
        ) from exc


def encode_headers(headers: HeadersLike | None) -> list[list[str]]:
    if headers is None:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    encoded: list[list[str]] = []
    for name, value in pairs:
        if not isinstance(name, str) or not name:
            raise InvalidEventError(f"header names must be non-empty strings, got {name!r}")
        if name in RESERVED_HEADERS:
            raise InvalidEventError(f"header {name!r} is set by the relay itself")
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if not isinstance(raw, bytes):
            raise InvalidEventError(f"header {name!r} must be str or bytes")
        encoded.append([name, base64.b64encode(raw).decode("ascii")])
    return encoded


def decode_headers(stored: list[list[str]]) -> tuple[tuple[str, bytes], ...]:
    return tuple((name, base64.b64decode(value)) for name, value in stored)


def _row(event: Event) -> dict[str, Any]:
    if not isinstance(event.topic, str) or not TOPIC_NAME.match(event.topic):
        raise InvalidEventError(
            f"invalid Kafka topic name {event.topic!r}: use 1-249 of [A-Za-z0-9._-]"
        )
    return {
        "topic": event.topic,
        "key": encode_key(event.key),
        "value": encode_value(event.value),
        "event_type": event.event_type,
        "headers": encode_headers(event.headers),
    }


def publish_many(bind: Session | Connection, events: Iterable[Event]) -> int:
    """Add ``events`` to the transaction of ``bind``, in order. Returns how many."""
    rows = [_row(event) for event in events]
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
