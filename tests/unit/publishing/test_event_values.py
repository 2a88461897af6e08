"""What the write API accepts and how it encodes it: JSON values (built-in conversions,
an encoder hook per call and per process, no NaN), event types, null header values and
the event id every event carries."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy.orm import Session

import relay
from relay.errors import InvalidEventError
from relay.kafka.publisher import batch_headers_bound, record_headers
from relay.kafka.topics import headers_bound
from relay.publishing.event_ids import new_event_id
from relay.publishing.events import (
    EVENT_ID_HEADER,
    decode_headers,
    decode_headers_json,
    encode_headers,
    outbox_row,
)
from relay.publishing.types import OutboxRecord
from relay.testing import RecordingOutbox, capture_events

SESSION = Session()


@pytest.fixture(autouse=True)
def no_process_default() -> Iterator[None]:
    before = relay.set_json_default(None)
    try:
        yield
    finally:
        relay.set_json_default(before)


def stored_value(value: Any, **kwargs: Any) -> Any:
    outbox = RecordingOutbox()
    outbox.publish(SESSION, "t", None, value, **kwargs)
    return outbox.events[-1].json()


def test_datetimes_uuids_and_decimals_are_encoded_without_help() -> None:
    moment = datetime(2026, 11, 26, 14, 5, 9, 123456, tzinfo=timezone(timedelta(hours=1)))
    some_id = uuid.UUID("0190b2a4-5c3e-7d21-8f00-1234567890ab")
    value = {
        "at": moment,
        "naive": datetime(2026, 1, 2, 3, 4, 5),
        "utc": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "day": date(2026, 11, 26),
        "clock": time(9, 30),
        "id": some_id,
        "amount": Decimal("12345678901234567890.10"),
        "nested": [Decimal("-0.5"), {"x": date(2000, 2, 29)}],
    }
    assert stored_value(value) == {
        "at": "2026-11-26T14:05:09.123456+01:00",
        "naive": "2026-01-02T03:04:05",
        "utc": "2026-01-02T03:04:05+00:00",
        "day": "2026-11-26",
        "clock": "09:30:00",
        "id": "0190b2a4-5c3e-7d21-8f00-1234567890ab",
        "amount": "12345678901234567890.10",  # a string: exact, whatever the reader
        "nested": ["-0.5", {"x": "2000-02-29"}],
    }


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents


def money(obj: object) -> object:
    if isinstance(obj, Money):
        return {"cents": obj.cents}
    if isinstance(obj, Decimal):
        return float(obj)
    raise TypeError(f"cannot encode {type(obj).__name__}")


def test_an_encoder_per_call_goes_before_the_built_in_conversions() -> None:
    value = {"price": Money(990), "rate": Decimal("0.25"), "day": date(2026, 1, 1)}
    assert stored_value(value, json_default=money) == {
        "price": {"cents": 990},
        "rate": 0.25,  # the hook chose a number
        "day": "2026-01-01",  # the hook raised TypeError: the built-in conversion
    }
    with pytest.raises(InvalidEventError, match="Money"):
        stored_value({"price": Money(1)})  # without the hook


def test_a_process_wide_encoder_applies_to_every_call_unless_one_gives_its_own() -> None:
    assert relay.set_json_default(money) is None
    assert stored_value({"price": Money(5)}) == {"price": {"cents": 5}}
    assert stored_value(Decimal("1.5"), json_default=lambda o: "own") == "own"
    outbox = RecordingOutbox()
    outbox.publish_many(SESSION, [relay.Event("t", None, [Money(7)])])
    assert outbox.events[0].json() == [{"cents": 7}]
    assert relay.set_json_default(None) is money
    with pytest.raises(InvalidEventError, match="Money"):
        stored_value(Money(1))


def test_publish_many_takes_an_encoder_for_all_its_events() -> None:
    outbox = RecordingOutbox()
    events = [relay.Event("t", None, Money(n)) for n in range(3)]
    assert outbox.publish_many(SESSION, events, json_default=money) == 3
    assert [e.json() for e in outbox.events] == [{"cents": n} for n in range(3)]


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        {"a": [1.0, -float("inf")]},
        Decimal("NaN"),
        {"d": Decimal("-Infinity")},
        Decimal("sNaN"),
    ],
)
def test_nan_and_infinities_are_refused_and_nothing_is_written(value: Any) -> None:
    outbox = RecordingOutbox()
    events = [relay.Event("t", "k", {"ok": 1}), relay.Event("t", "k", value)]
    with pytest.raises(InvalidEventError, match="NaN or an infinity") as refused:
        outbox.publish_many(SESSION, events)
    assert isinstance(refused.value, ValueError)
    assert outbox.events == []
    with pytest.raises(ValueError, match="NaN or an infinity"):
        outbox_row(relay.Event("t", "k", value))


@pytest.mark.parametrize(
    ("event_type", "reason"),
    [
        (5, "must be a str"),
        (b"OrderPlaced", "must be a str"),
        ("", "1-255 characters"),
        ("x" * 256, "1-255 characters"),
        ("Order\nPlaced", "control characters"),
        ("Order\x00", "control characters"),
        (" OrderPlaced", "leading or trailing whitespace"),
    ],
)
def test_an_invalid_event_type_is_refused_with_one_clear_error(
    event_type: Any, reason: str
) -> None:
    outbox = RecordingOutbox()
    with pytest.raises(InvalidEventError, match=f"event_type .*{reason}"):
        outbox.publish(SESSION, "t", "k", 1, event_type=event_type)
    assert outbox.events == []


def test_sane_event_types_pass() -> None:
    outbox = RecordingOutbox()
    for event_type in ("OrderPlaced", "orders.v2/placed", "Créé", "x" * 255, "a b"):
        outbox.publish(SESSION, "t", "k", 1, event_type=event_type)
    assert [e.event_type for e in outbox.events][-1] == "a b"


def test_a_null_header_value_is_stored_and_read_back_as_none() -> None:
    stored = encode_headers([("trace", None), ("b", b"x"), ("trace", "y")])
    assert stored == [["trace", None], ["b", "eA=="], ["trace", "eQ=="]]
    assert decode_headers(json.loads(json.dumps(stored))) == (
        ("trace", None),
        ("b", b"x"),
        ("trace", b"y"),
    )
    with capture_events() as outbox:
        relay.publish(SESSION, "t", "k", 1, {"gone": None})
    assert outbox.events[0].headers == (("gone", None),)


def test_a_null_header_value_is_a_null_kafka_header_within_the_size_bound() -> None:
    record = OutboxRecord(1, 0, 1, "t", b"k", b"v", None, (("gone", None), ("x", b"")))
    assert record_headers(record)[-2:] == [("gone", None), ("x", b"")]
    assert batch_headers_bound([record]) >= headers_bound(record_headers(record))


def test_every_event_gets_a_time_ordered_uuid7_id_in_its_headers() -> None:
    outbox = RecordingOutbox()
    before = datetime.now(UTC)
    first = outbox.publish(SESSION, "t", "k", 1, {"trace": "a"})
    second = outbox.publish(SESSION, "t", "k", 2)
    assert isinstance(first, uuid.UUID) and isinstance(second, uuid.UUID)
    assert (first.version, first.variant) == (7, uuid.RFC_4122)
    assert first < second  # time-ordered, and within a millisecond still increasing
    millis = first.int >> 80
    assert abs(millis / 1000 - before.timestamp()) < 5
    recorded = outbox.events
    assert [e.event_id for e in recorded] == [first, second]
    assert recorded[0].headers == (("trace", b"a"),)  # the event's own, as before
    row = outbox_row(relay.Event("t", "k", 1, {"trace": "a"}))
    stored = json.loads(row["headers"])
    assert stored[0][0] == EVENT_ID_HEADER == "event-id"
    assert uuid.UUID(decode_headers(stored)[0][1].decode()).version == 7  # type: ignore[union-attr]
    assert stored[1:] == [["trace", "YQ=="]]


def test_the_event_id_is_what_publish_returns_also_async_and_can_be_chosen() -> None:
    chosen = new_event_id()
    with capture_events() as outbox:
        returned = asyncio.run(relay.publish_async(SESSION, "t", "k", 1))  # type: ignore[arg-type]
        relay.publish_many(SESSION, [relay.Event("t", "k", 2, event_id=chosen)])
    assert [e.event_id for e in outbox.events] == [returned, chosen]
    with pytest.raises(InvalidEventError, match=r"event_id must be a uuid\.UUID"):
        outbox_row(relay.Event("t", "k", 1, event_id=str(chosen)))  # type: ignore[arg-type]


def test_ids_are_unique_and_increasing_in_a_burst() -> None:
    ids = [new_event_id() for _ in range(20_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids[::997])


def test_services_may_not_set_the_event_id_header_but_a_stored_one_is_published() -> None:
    with pytest.raises(InvalidEventError, match="set by the write API itself"):
        encode_headers({"event-id": "mine"})
    # A plain-SQL writer may store its own: the relay publishes it as it is.
    assert decode_headers([["event-id", "YWJj"]]) == (("event-id", b"abc"),)


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '[["event-id", "MDE5MGIyYTQtNWMzZS03ZDIxLThmMDAtMTIzNDU2Nzg5MGFi"]]',  # as jsonb shows it
        '[["event-id","MDE5MGIyYTQtNWMzZS03ZDIxLThmMDAtMTIzNDU2Nzg5MGFi"]]',
        '[["event-id", "MDE5MGIyYTQtNWMzZS03ZDIxLThmMDAtMTIzNDU2Nzg5MGFi"], ["t", null]]',
        '[["event-id", "c3FsLTE="]]',
    ],
)
def test_the_relays_fast_reading_of_the_headers_column_reads_as_the_parser(text: str) -> None:
    assert decode_headers_json(text) == decode_headers(json.loads(text))


def test_the_fast_reading_refuses_what_the_parser_refuses() -> None:
    text = '[["event-id", "MDE5MGIyYTQtNWMzZS03ZDIxLThmMDAtMTIzNDU2Nz", "xy"]]'
    assert len(text) == len('[["event-id", "') + 48 + len('"]]')  # the lone id's length
    with pytest.raises(InvalidEventError, match="pair"):
        decode_headers_json(text)
    bad = '[["event-id", "MDE5MGIyYTQtNWMzZS03ZDIxLThmMDAtMTIzNDU2Nzg5M!!!"]]'
    with pytest.raises(InvalidEventError, match="not base64"):
        decode_headers_json(bad)
