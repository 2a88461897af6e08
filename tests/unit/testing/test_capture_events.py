"""relay.testing: what a service's unit test sees of the events its code publishes."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

import relay
import relay.testing
from relay.postgres import outbox_writer
from relay.publishing.events import outbox_row
from relay.testing import RecordedEvent, RecordingOutbox, capture_events

# Sessions bound to no database: the recorder records the bind and does not use it.
SESSION = Session()
ASYNC_SESSION = AsyncSession()


def place_order(session: Session, order_id: int) -> None:
    """Service code as a service author writes it."""
    relay.publish(
        session,
        "orders",
        f"order-{order_id}",
        {"id": order_id, "note": "café"},
        {"trace-id": "abc"},
        event_type="OrderPlaced",
    )


async def cancel_orders(session: AsyncSession, order_ids: list[int]) -> int:
    events = [relay.Event("orders", f"order-{n}", None) for n in order_ids]
    return await relay.publish_many_async(session, events)


def test_an_event_is_recorded_as_the_outbox_row_holds_it() -> None:
    with capture_events() as outbox:
        place_order(SESSION, 42)
    (event,) = outbox.events
    assert event == RecordedEvent(
        "orders",
        b"order-42",
        '{"id":42,"note":"café"}'.encode(),
        (("trace-id", b"abc"),),
        "OrderPlaced",
        SESSION,
    )
    assert event.json() == {"id": 42, "note": "café"}
    row = outbox_row(relay.Event("orders", "order-42", {"id": 42, "note": "café"}))
    assert (event.key, event.value) == (row["key"], row["value"])


def test_the_async_variants_record_in_order() -> None:
    with capture_events() as outbox:
        assert asyncio.run(cancel_orders(ASYNC_SESSION, [1, 2])) == 2
        asyncio.run(relay.publish_async(ASYNC_SESSION, "audit", None, b"raw"))
    assert [(e.topic, e.key, e.value) for e in outbox.events] == [
        ("orders", b"order-1", None),
        ("orders", b"order-2", None),
        ("audit", None, b"raw"),
    ]
    assert [e.key for e in outbox.in_topic("orders")] == [b"order-1", b"order-2"]
    with pytest.raises(ValueError, match="tombstone"):
        outbox.events[0].json()
    outbox.clear()
    assert outbox.events == []


def test_an_event_the_write_api_refuses_is_refused_and_none_of_its_batch_recorded() -> None:
    with capture_events() as outbox:
        with pytest.raises(relay.InvalidEventError, match="invalid Kafka topic name"):
            relay.publish(SESSION, "no spaces", "k", 1)
        with pytest.raises(relay.InvalidEventError, match="set by the relay itself"):
            relay.publish_many(
                SESSION,
                [relay.Event("t", "k", 1), relay.Event("t", "k", 2, {"outbox-id": "1"})],
            )
        with pytest.raises(relay.InvalidEventError, match="JSON-serialisable"):
            relay.publish(SESSION, "t", "k", {1, 2})
    assert outbox.events == []


def test_the_real_write_api_is_back_after_the_block_also_after_an_error() -> None:
    real = relay.publish
    with pytest.raises(RuntimeError), capture_events():
        assert relay.publish is not real
        raise RuntimeError
    assert relay.publish is real is outbox_writer.publish
    assert relay.publish_many_async is outbox_writer.publish_many_async


def test_nested_captures_each_record_their_own() -> None:
    with capture_events() as outer:
        relay.publish(SESSION, "t", "a", 1)
        with capture_events() as inner:
            relay.publish(SESSION, "t", "b", 2)
        relay.publish(SESSION, "t", "c", 3)
    assert [e.key for e in outer.events] == [b"a", b"c"]
    assert [e.key for e in inner.events] == [b"b"]


@pytest.mark.parametrize("name", relay.testing.WRITE_API)
def test_the_recorder_takes_what_the_write_api_takes(name: str) -> None:
    real = inspect.signature(getattr(outbox_writer, name))
    recorder = inspect.signature(getattr(RecordingOutbox(), name))
    assert [(p.name, p.kind, p.default) for p in recorder.parameters.values()] == [
        (p.name, p.kind, p.default) for p in real.parameters.values()
    ]
    assert inspect.iscoroutinefunction(getattr(outbox_writer, name)) == (
        inspect.iscoroutinefunction(getattr(RecordingOutbox, name))
    )
