"""For your service's unit tests: record the events your code publishes, without a database.

>>> import relay.testing
>>> with relay.testing.capture_events() as outbox:
...     place_order(Session(), order_id=42)  # your code, which calls relay.publish
>>> [(e.topic, e.key, e.json()) for e in outbox.events]
[('orders', b'order-42', {'id': 42})]

Inside :func:`capture_events`, ``relay.publish``, ``relay.publish_many``,
``relay.publish_async`` and ``relay.publish_many_async`` record instead of writing: each
event is checked and encoded by the write API's own code
(:func:`relay.publishing.events.outbox_row`), so an event the real call refuses raises the
same :class:`~relay.errors.InvalidEventError`, and a recorded event holds the bytes the
relay would send to Kafka. What is *not* checked: the session or connection (recorded as
given and never used: a ``Session()`` bound to no database will do) and its transaction
(an event recorded in a transaction your code then rolls back stays recorded). Those need
the real database: an integration test with ``relay db upgrade`` applied, reading the
``outbox`` table.

Only calls through the module (``relay.publish(...)``) are redirected; code that did
``from relay import publish`` holds the real function. Such code, or code that takes its
publish function as a parameter, can be handed a :class:`RecordingOutbox`'s methods, which
have the write API's signatures.

Nothing here imports a database driver or a Kafka client.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import relay
from relay.publishing.event_ids import new_event_id
from relay.publishing.events import (
    Event,
    HeadersLike,
    KeyLike,
    decode_headers,
    encode_headers,
    outbox_row,
)
from relay.publishing.formats import RecordFormat
from relay.publishing.json_values import JsonDefault

WRITE_API = ("publish", "publish_many", "publish_async", "publish_many_async")


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """One event as the outbox row would hold it, and the bind it was published through."""

    topic: str
    key: bytes | None
    value: bytes | None  # None is a tombstone
    # The event's own (a null value is None); the relay adds outbox-* ones and event-id.
    headers: tuple[tuple[str, bytes | None], ...]
    event_type: str | None  # sent as the event-type header
    bind: object
    # Sent as the event-id header; left out of comparisons (each run makes new ones).
    event_id: uuid.UUID | None = field(default=None, compare=False)
    # The current span's traceparent/tracestate, which the write API adds after the
    # event's own headers (relay.runtime.tracing); left out of comparisons too.
    trace_headers: tuple[tuple[str, bytes | None], ...] = field(default=(), compare=False)

    def json(self) -> Any:
        """The value decoded as JSON (what a dict or list value was encoded as)."""
        if self.value is None:
            raise ValueError(f"the event on {self.topic!r} is a tombstone: it has no value")
        return json.loads(self.value)


@dataclass
class RecordingOutbox:
    """The write API in memory: every accepted event, in the order published."""

    events: list[RecordedEvent] = field(default_factory=list)

    def in_topic(self, topic: str) -> list[RecordedEvent]:
        return [event for event in self.events if event.topic == topic]

    def clear(self) -> None:
        self.events.clear()

    def publish_many(
        self,
        bind: object,
        events: Iterable[Event],
        *,
        json_default: JsonDefault | None = None,
        key_format: RecordFormat | None = None,
        value_format: RecordFormat | None = None,
    ) -> int:
        """Like :func:`relay.publish_many`: every event is checked (and serialized by its
        formats) before any is recorded."""
        formats = {"key_format": key_format, "value_format": value_format}
        rows = [(outbox_row(event, json_default, **formats), event.headers) for event in events]
        self.events.extend(_recorded(row, bind, len(encode_headers(own))) for row, own in rows)
        return len(rows)

    async def publish_many_async(
        self,
        bind: object,
        events: Iterable[Event],
        *,
        json_default: JsonDefault | None = None,
        key_format: RecordFormat | None = None,
        value_format: RecordFormat | None = None,
    ) -> int:
        return self.publish_many(
            bind,
            events,
            json_default=json_default,
            key_format=key_format,
            value_format=value_format,
        )

    def publish(
        self,
        bind: object,
        topic: str,
        key: KeyLike,
        value: Any,
        headers: HeadersLike | None = None,
        *,
        event_type: str | None = None,
        json_default: JsonDefault | None = None,
        key_format: RecordFormat | None = None,
        value_format: RecordFormat | None = None,
    ) -> uuid.UUID:
        event_id = new_event_id()
        event = Event(topic, key, value, headers, event_type, event_id)
        self.publish_many(
            bind,
            [event],
            json_default=json_default,
            key_format=key_format,
            value_format=value_format,
        )
        return event_id

    async def publish_async(
        self,
        bind: object,
        topic: str,
        key: KeyLike,
        value: Any,
        headers: HeadersLike | None = None,
        *,
        event_type: str | None = None,
        json_default: JsonDefault | None = None,
        key_format: RecordFormat | None = None,
        value_format: RecordFormat | None = None,
    ) -> uuid.UUID:
        return self.publish(
            bind,
            topic,
            key,
            value,
            headers,
            event_type=event_type,
            json_default=json_default,
            key_format=key_format,
            value_format=value_format,
        )


def _recorded(row: dict[str, Any], bind: object, own: int) -> RecordedEvent:
    """The INSERT's parameters as a recorded event: the event id (the first header) and
    the trace headers (after the event's ``own`` headers), which the write API adds, apart
    from the event's own headers."""
    (_, event_id), *headers = decode_headers(json.loads(row["headers"]))
    return RecordedEvent(
        row["topic"],
        row["key"],
        row["value"],
        tuple(headers[:own]),
        row["event_type"],
        bind,
        uuid.UUID((event_id or b"").decode("ascii")),
        tuple(headers[own:]),
    )


@contextmanager
def capture_events() -> Iterator[RecordingOutbox]:
    """Redirect ``relay.publish`` and its variants to a new :class:`RecordingOutbox` until
    the block ends (then whatever they were before is back, also after an exception).

    Not thread-safe across tests running in parallel in one process: the redirection is
    of the ``relay`` module's attributes, which every thread shares."""
    outbox = RecordingOutbox()
    namespace = vars(relay)
    before = {name: namespace[name] for name in WRITE_API if name in namespace}
    try:
        for name in WRITE_API:
            namespace[name] = getattr(outbox, name)
        yield outbox
    finally:
        for name in WRITE_API:
            if name in before:
                namespace[name] = before[name]
            else:  # never loaded: the next use loads the real one
                namespace.pop(name, None)
