"""Events as the write API takes them, and how each becomes an outbox row's columns.

Pure: validating and encoding an event needs no database. The row is written by
:mod:`relay.postgres.outbox_writer` inside the caller's transaction (I1, docs/invariants.md).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from relay.errors import InvalidEventError
from relay.publishing.event_ids import new_event_id
from relay.publishing.formats import RecordFormat
from relay.publishing.json_values import JsonDefault, to_json
from relay.runtime.tracing import TRACE_HEADERS, trace_headers

TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
EVENT_TYPE_MAX = 255  # characters
EVENT_ID_HEADER = "event-id"  # the event's UUIDv7, stored by the write API in the headers
# Headers the relay sets on each record from the row's other columns: never in the column.
RELAY_HEADERS = frozenset({"outbox-id", "outbox-seq", "outbox-partition", "event-type"})
# Headers a service may not give: the relay's, and the id the write API gives each event.
RESERVED_HEADERS = RELAY_HEADERS | {EVENT_ID_HEADER}
RESERVED_HEADER_PREFIX = "outbox-"  # every header named outbox-* is the relay's own

KeyLike = str | bytes | None
HeaderValue = str | bytes | None  # None: a Kafka header with a null value
HeadersLike = Mapping[str, HeaderValue] | Iterable[tuple[str, HeaderValue]]


@dataclass(frozen=True, slots=True)
class Event:
    """One event for :func:`publish_many`."""

    topic: str
    key: KeyLike
    value: Any
    headers: HeadersLike | None = None
    event_type: str | None = None
    # None: the write API gives the event a new UUIDv7 (relay.publishing.event_ids).
    event_id: uuid.UUID | None = None


def encode_key(key: KeyLike) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    raise InvalidEventError(f"event key must be str, bytes or None, not {type(key).__name__}")


def encode_value(value: Any, json_default: JsonDefault | None = None) -> bytes | None:
    """bytes pass through, None is a tombstone, anything else is serialised as JSON
    (:mod:`relay.publishing.json_values`)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return to_json(value, json_default)


def check_event_type(event_type: object) -> str | None:
    """None, or 1-255 characters, no control characters, no surrounding whitespace."""
    if event_type is None:
        return None
    if not isinstance(event_type, str):
        raise InvalidEventError(
            f"event_type must be a str or None, not {type(event_type).__name__}"
        )
    if not 0 < len(event_type) <= EVENT_TYPE_MAX:
        raise InvalidEventError(
            f"event_type must have 1-{EVENT_TYPE_MAX} characters, got {len(event_type)}"
        )
    if not event_type.isprintable():
        raise InvalidEventError(f"event_type {event_type!r} holds control characters")
    if event_type != event_type.strip():
        raise InvalidEventError(f"event_type {event_type!r} has leading or trailing whitespace")
    return event_type


def encode_headers(headers: HeadersLike | None) -> list[list[str | None]]:
    """The event's headers as the column holds them: ``[name, base64 value or null]``."""
    if headers is None:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    encoded: list[list[str | None]] = []
    for name, value in pairs:
        if not isinstance(name, str) or not name:
            raise InvalidEventError(f"header names must be non-empty strings, got {name!r}")
        if name == EVENT_ID_HEADER:
            raise InvalidEventError(f"header {name!r} is set by the write API itself")
        if is_reserved_header(name):
            raise InvalidEventError(f"header {name!r} is set by the relay itself")
        if value is None:
            encoded.append([name, None])
            continue
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if not isinstance(raw, bytes):
            raise InvalidEventError(f"header {name!r} must be str, bytes or None")
        encoded.append([name, base64.b64encode(raw).decode("ascii")])
    return encoded


def is_reserved_header(name: str) -> bool:
    return name in RESERVED_HEADERS or name.startswith(RESERVED_HEADER_PREFIX)


def is_relay_header(name: str) -> bool:
    """A header the relay sets itself: the headers column may not hold it."""
    return name in RELAY_HEADERS or name.startswith(RESERVED_HEADER_PREFIX)


def decode_headers(stored: object) -> tuple[tuple[str, bytes | None], ...]:
    """The headers column (``[[name, base64 value or null], ...]``) as Kafka headers.
    The ``event-id`` the write API stores is one of them; a plain-SQL writer may store
    its own.

    Rows written by plain SQL, COPY or another language may hold anything: each way the
    column can be wrong is an InvalidEventError whose text becomes the dead letter's
    reason (I5, docs/invariants.md)."""
    if not isinstance(stored, list):
        raise InvalidEventError(
            f"headers must be a JSON array of [name, base64 value] pairs, got {_shown(stored)}"
        )
    if not stored:
        return ()  # most rows: no headers of the event's own
    decoded: list[tuple[str, bytes | None]] = []
    for pair in stored:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not isinstance(pair[0], str)
            or not pair[0]
            or not (pair[1] is None or isinstance(pair[1], str))
        ):
            raise InvalidEventError(
                f"each header must be a [name, base64 value or null] pair, got {_shown(pair)}"
            )
        name, value = pair
        if is_relay_header(name):
            raise InvalidEventError(f"header {name!r} is set by the relay itself")
        if value is None:
            decoded.append((name, None))
            continue
        try:
            # base64.b64decode(value, validate=True) without its wrapper
            decoded.append((name, binascii.a2b_base64(value, strict_mode=True)))
        except (binascii.Error, ValueError):
            raise InvalidEventError(f"header {name!r}: its value is not base64") from None
    return tuple(decoded)


# The headers column the write API stores for an event without headers of its own, as
# jsonb shows it (the base64 of a UUID's 36 characters: 48 characters, no padding).
_LONE_ID_START = '[["event-id", "'
_LONE_ID_LENGTH = len(_LONE_ID_START) + 48 + len('"]]')


def decode_headers_json(text: str) -> tuple[tuple[str, bytes | None], ...]:
    """:func:`decode_headers` of the column's JSON text. The relay's hot path: the two
    most common columns, no headers and the write API's lone event id, are read without
    the JSON parser."""
    if text == "[]":
        return ()
    if len(text) == _LONE_ID_LENGTH and text.startswith(_LONE_ID_START) and text[-3:] == '"]]':
        try:
            value = binascii.a2b_base64(text[len(_LONE_ID_START) : -3], strict_mode=True)
        except binascii.Error:
            pass  # not base64 (a quote, say): the parser says what it is
        else:
            return ((EVENT_ID_HEADER, value),)
    return decode_headers(json.loads(text))


def _shown(value: object, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def outbox_rows(
    events: Iterable[Event],
    json_default: JsonDefault | None = None,
    *,
    key_format: RecordFormat | None = None,
    value_format: RecordFormat | None = None,
) -> list[dict[str, Any]]:
    """The parameters of the write API's INSERT, one dict an event, in order; every event
    is checked (and serialized) before the first is written."""
    return [
        outbox_row(event, json_default, key_format=key_format, value_format=value_format)
        for event in events
    ]


def serialized(record_format: RecordFormat, topic: str, obj: Any, *, is_key: bool) -> bytes | None:
    """``obj`` through ``record_format`` (:mod:`relay.publishing.formats`); None stays None
    (a null key, a tombstone)."""
    if obj is None:
        return None
    if not isinstance(record_format, RecordFormat):
        what = "key_format" if is_key else "value_format"
        raise InvalidEventError(
            f"{what} must have a serialize(topic, obj, is_key=...) method,"
            f" not {type(record_format).__name__}"
        )
    return record_format.serialize(topic, obj, is_key=is_key)


def outbox_row(
    event: Event,
    json_default: JsonDefault | None = None,
    *,
    key_format: RecordFormat | None = None,
    value_format: RecordFormat | None = None,
) -> dict[str, Any]:
    """One event as the INSERT's parameters: ``headers`` is the column's JSON text, its
    first header the event id; then the event's own, then the current span's W3C
    ``traceparent``/``tracestate`` (:mod:`relay.runtime.tracing`) unless it gave its own.
    With ``key_format``/``value_format`` the key/value is that format's bytes, made last,
    once everything else of the event is checked."""
    if not isinstance(event.topic, str) or not TOPIC_NAME.match(event.topic):
        raise InvalidEventError(
            f"invalid Kafka topic name {event.topic!r}: use 1-249 of [A-Za-z0-9._-]"
        )
    event_id = new_event_id() if event.event_id is None else event.event_id
    if not isinstance(event_id, uuid.UUID):
        raise InvalidEventError(
            f"event_id must be a uuid.UUID or None, not {type(event_id).__name__}"
        )
    encoded_id = base64.b64encode(str(event_id).encode("ascii")).decode("ascii")
    headers: list[list[str | None]] = [[EVENT_ID_HEADER, encoded_id]]
    headers += encode_headers(event.headers)
    if (traced := trace_headers()) and not any(pair[0] in TRACE_HEADERS for pair in headers):
        headers += [
            [name, base64.b64encode(value.encode()).decode("ascii")] for name, value in traced
        ]
    row: dict[str, Any] = {
        "topic": event.topic,
        "event_type": check_event_type(event.event_type),
        "headers": json.dumps(headers, separators=(",", ":")),
    }
    if key_format is None:
        row["key"] = encode_key(event.key)
    else:
        row["key"] = serialized(key_format, event.topic, event.key, is_key=True)
    if value_format is None:
        row["value"] = encode_value(event.value, json_default)
    else:
        row["value"] = serialized(value_format, event.topic, event.value, is_key=False)
    return row
