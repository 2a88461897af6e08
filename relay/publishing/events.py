"""Events as the write API takes them, and how each becomes an outbox row's columns.

Pure: validating and encoding an event needs no database. The row is written by
:mod:`relay.postgres.outbox_writer` inside the caller's transaction (I1, docs/invariants.md).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from relay.errors import InvalidEventError

TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
RESERVED_HEADERS = frozenset({"outbox-id", "outbox-seq", "outbox-partition", "event-type"})
RESERVED_HEADER_PREFIX = "outbox-"  # every header named outbox-* is the relay's own

KeyLike = str | bytes | None
HeaderValue = str | bytes
HeadersLike = Mapping[str, HeaderValue] | Iterable[tuple[str, HeaderValue]]


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
        if is_reserved_header(name):
            raise InvalidEventError(f"header {name!r} is set by the relay itself")
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if not isinstance(raw, bytes):
            raise InvalidEventError(f"header {name!r} must be str or bytes")
        encoded.append([name, base64.b64encode(raw).decode("ascii")])
    return encoded


def is_reserved_header(name: str) -> bool:
    return name in RESERVED_HEADERS or name.startswith(RESERVED_HEADER_PREFIX)


def decode_headers(stored: object) -> tuple[tuple[str, bytes], ...]:
    """The headers column (``[[name, base64 value], ...]``) as Kafka headers.

    Rows written by plain SQL, COPY or another language may hold anything: each way the
    column can be wrong is an InvalidEventError whose text becomes the dead letter's
    reason (I5, docs/invariants.md)."""
    if not isinstance(stored, list):
        raise InvalidEventError(
            f"headers must be a JSON array of [name, base64 value] pairs, got {_shown(stored)}"
        )
    if not stored:
        return ()  # most rows: no headers of the event's own
    decoded: list[tuple[str, bytes]] = []
    for pair in stored:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not isinstance(pair[0], str)
            or not pair[0]
            or not isinstance(pair[1], str)
        ):
            raise InvalidEventError(
                f"each header must be a [name, base64 value] pair, got {_shown(pair)}"
            )
        name, value = pair
        if is_reserved_header(name):
            raise InvalidEventError(f"header {name!r} is set by the relay itself")
        try:
            # base64.b64decode(value, validate=True) without its wrapper
            decoded.append((name, binascii.a2b_base64(value, strict_mode=True)))
        except (binascii.Error, ValueError):
            raise InvalidEventError(f"header {name!r}: its value is not base64") from None
    return tuple(decoded)


def _shown(value: object, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def outbox_rows(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The parameters of the write API's INSERT, one dict an event, in order; every event
    is checked before the first is written."""
    return [outbox_row(event) for event in events]


def outbox_row(event: Event) -> dict[str, Any]:
    """One event as the INSERT's parameters: ``headers`` is the column's JSON text."""
    if not isinstance(event.topic, str) or not TOPIC_NAME.match(event.topic):
        raise InvalidEventError(
            f"invalid Kafka topic name {event.topic!r}: use 1-249 of [A-Za-z0-9._-]"
        )
    return {
        "topic": event.topic,
        "key": encode_key(event.key),
        "value": encode_value(event.value),
        "event_type": event.event_type,
        "headers": json.dumps(encode_headers(event.headers), separators=(",", ":")),
    }
