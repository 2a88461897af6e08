"""Tracing (relay.runtime.tracing): the write API's trace headers, the relay's publish span
per transaction with links, the mirror's apply spans as children; and nothing breaks, nor
is anything added, without an SDK configured or without the API installed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import relay
from relay.mirroring.applier import Applier
from relay.publishing.events import Event, decode_headers, outbox_row
from relay.publishing.partition_relay import PartitionRelay
from relay.publishing.traced import TracedPublisher
from relay.publishing.types import OutboxRecord
from relay.runtime import tracing
from relay.testing import capture_events
from tests.fakes.mirroring import MemoryStore, items_table, record
from tests.fakes.publishing import OWNER, FakeClock, MemoryKafka, MemoryOutbox
from tests.otel import recorded_spans

ROOT = Path(__file__).resolve().parents[3]
GIVEN = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"  # a traceparent the service gives itself


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans()


def _headers(event: Event) -> tuple[tuple[str, bytes | None], ...]:
    return decode_headers(json.loads(outbox_row(event)["headers"]))


def test_the_write_api_stores_the_current_spans_traceparent(
    spans: InMemorySpanExporter,
) -> None:
    assert [n for n, _ in _headers(Event("t", "k", {}))] == ["event-id"]  # no span: none
    with trace.get_tracer("shop").start_as_current_span("place order") as span:
        headers = dict(_headers(Event("t", "k", {}, {"mine": "1"})))
        own = dict(_headers(Event("t", "k", {}, {"traceparent": GIVEN})))
    context = span.get_span_context()
    assert headers["traceparent"] == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}".encode()
    )
    assert headers["mine"] == b"1"
    assert own["traceparent"] == GIVEN.encode()


def _traced_record(seq: int, topic: str, traceparent: bytes | None) -> OutboxRecord:
    headers = (("traceparent", traceparent),) if traceparent else ()
    return OutboxRecord(seq, 0, seq, topic, b"k", b"{}", None, headers)


def test_the_relay_records_a_publish_span_per_transaction_linked_to_each_trace(
    spans: InMemorySpanExporter,
) -> None:
    tracer = trace.get_tracer("shop")
    parents = []
    outbox = MemoryOutbox()
    for seq in (1, 2):
        with tracer.start_as_current_span(f"service {seq}") as span:
            parents.append(span.get_span_context())
            (traceparent,) = [v for n, v in tracing.trace_headers() if n == "traceparent"]
        outbox.add(_traced_record(seq, "orders", traceparent.encode()))
    outbox.add(_traced_record(3, "orders", None))
    kafka = MemoryKafka()
    relay = PartitionRelay(
        0, outbox, TracedPublisher(kafka.publisher(0), 0), owner=OWNER, clock=FakeClock()
    )
    relay.drain()
    (publish,) = [s for s in spans.get_finished_spans() if s.name.startswith("publish")]
    assert publish.name == "publish orders"
    assert publish.kind is SpanKind.PRODUCER
    assert [link.context.span_id for link in publish.links] == [p.span_id for p in parents]
    assert publish.parent is None
    assert publish.attributes is not None
    assert publish.attributes["messaging.system"] == "kafka"
    assert publish.attributes["messaging.destination.name"] == "orders"
    assert publish.attributes["messaging.batch.message_count"] == 3
    assert publish.status.status_code is StatusCode.UNSET


def test_the_apply_spans_are_children_of_the_records_traceparent(
    spans: InMemorySpanExporter,
) -> None:
    with trace.get_tracer("shop").start_as_current_span("service") as span:
        headers = [(n, v.encode()) for n, v in tracing.trace_headers()]
    opened = tracing.start_apply_spans(
        [tracing.Applied("orders", 2, 41, tuple(headers)), tracing.Applied("orders", 2, 42, ())]
    )
    opened.end()
    (applied,) = spans.get_finished_spans()[1:]
    assert applied.name == "apply orders"
    assert applied.kind is SpanKind.CONSUMER
    assert applied.parent is not None
    assert applied.parent.span_id == span.get_span_context().span_id
    assert applied.context.trace_id == span.get_span_context().trace_id
    assert applied.attributes is not None
    assert applied.attributes["messaging.kafka.offset"] == 41


# In a clean interpreter: no SDK configured (the API alone), then no API at all.
_WITHOUT = """
import json, sys
if sys.argv[1] == "no-api":
    sys.modules["opentelemetry"] = None  # import opentelemetry raises ImportError
from relay.publishing.events import Event, outbox_row
from relay.runtime import tracing
found = {"available": tracing.available()}
if sys.argv[1] == "no-sdk":
    from opentelemetry import trace
    with trace.get_tracer("shop").start_as_current_span("s"):
        found["headers"] = json.loads(outbox_row(Event("t", "k", {}))["headers"])
else:
    found["headers"] = json.loads(outbox_row(Event("t", "k", {}))["headers"])
tp = (("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"),)
tracing.start_publish_span(0, ["t"], [tp]).end()
tracing.start_publish_span(0, ["t"], [tp]).end("aborted")
tracing.start_apply_spans([tracing.Applied("t", 0, 1, tp)]).end()
print(json.dumps(found))
"""


@pytest.mark.parametrize("without", ["no-sdk", "no-api"])
def test_nothing_breaks_and_nothing_is_added_without_an_sdk_or_the_api(without: str) -> None:
    result = subprocess.run(
        [sys.executable, "-E", "-c", _WITHOUT, without],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["available"] is (without == "no-sdk")
    assert [name for name, _ in found["headers"]] == ["event-id"]


def test_recorded_events_keep_the_trace_headers_apart_from_their_own(
    spans: InMemorySpanExporter,
) -> None:
    """relay.testing: a service's test that runs inside a span compares events as
    without one; the trace headers the write API adds are there to look at."""
    session = object()
    with capture_events() as outbox:
        relay.publish(session, "t", "k", {}, {"mine": "1"})
        with trace.get_tracer("shop").start_as_current_span("service") as span:
            relay.publish(session, "t", "k", {}, {"mine": "1"})
    plain, traced = outbox.events
    assert traced == plain
    assert traced.headers == (("mine", b"1"),)
    assert plain.trace_headers == ()
    context = span.get_span_context()
    ((name, value),) = traced.trace_headers
    assert name == "traceparent"
    assert value is not None and f"{context.span_id:016x}" in value.decode()


def test_a_dead_lettered_records_apply_span_says_why(spans: InMemorySpanExporter) -> None:
    with trace.get_tracer("shop").start_as_current_span("service"):
        traced = tuple((n, v.encode()) for n, v in tracing.trace_headers())
    good = replace(record(0, 1, "lamp"), headers=traced)
    bad = replace(record(1, 2, "x"), value=b"{not json", headers=traced)
    applier = Applier([items_table()], MemoryStore())
    result = applier.apply(applier.batch("t", 0, None, 2, [good, bad]))
    assert result.applied == 1 and len(result.dead_letters) == 1
    applied = {
        s.attributes["messaging.kafka.offset"]: s
        for s in spans.get_finished_spans()[1:]
        if s.attributes
    }
    assert applied[0].status.status_code is StatusCode.UNSET
    assert applied[1].status.status_code is StatusCode.ERROR
    assert applied[1].status.description == result.dead_letters[0].error
