"""OpenTelemetry tracing, when the service installed the API (the ``otel`` extra): the only
module that imports ``opentelemetry``, and only when first asked (importing a core loads
nothing more).

* The write API stores the current span's W3C ``traceparent`` and ``tracestate`` among the
  event's headers (:func:`trace_headers`), so they travel with the record.
* The relay records one ``publish`` span (PRODUCER) per Kafka transaction of events, with a
  link to each event's trace (:func:`start_publish_span`): one transaction carries the
  events of many traces, so it is no child of any of them.
* The mirror records, for each applied record that carries a ``traceparent``, an ``apply``
  span (CONSUMER) that is a child of it (:func:`start_apply_spans`): the record is applied
  on its own trace, so the service's trace shows its event reaching the table (or, status
  ERROR with the reason, its dead letter).

Spans go to the global tracer provider, which the process configures (the SDK, an
exporter): with none, or without the API installed, every function here does nothing.
Attributes follow the OpenTelemetry semantic conventions for messaging.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
TRACE_HEADERS = frozenset({TRACEPARENT, TRACESTATE})
TRACER_NAME = "outbox-relay"
MESSAGING_SYSTEM = "kafka"

KafkaHeaders = Sequence[tuple[str, bytes | None]]


@cache
def _api() -> Any:
    """The ``opentelemetry`` API modules, or None when it is not installed."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    return trace, TraceContextTextMapPropagator()


def available() -> bool:
    """Whether the OpenTelemetry API is installed."""
    return _api() is not None


def trace_headers() -> list[tuple[str, str]]:
    """The current span's ``traceparent`` (and ``tracestate``, when it has one) as W3C
    Trace Context headers; none when no span is active or the API is missing."""
    api = _api()
    if api is None:
        return []
    trace, propagator = api
    if not trace.get_current_span().get_span_context().is_valid:
        return []
    carrier: dict[str, str] = {}
    propagator.inject(carrier)
    return [(name, carrier[name]) for name in (TRACEPARENT, TRACESTATE) if name in carrier]


def _tracer() -> Tracer:
    trace, _ = _api()
    tracer: Tracer = trace.get_tracer(TRACER_NAME)
    return tracer


def _context(headers: KafkaHeaders) -> Any:
    """The span context in ``headers``' traceparent, or None (none, or not valid)."""
    carrier = {
        name: value.decode("ascii", "replace")
        for name, value in headers
        if name in TRACE_HEADERS and value is not None
    }
    if TRACEPARENT not in carrier:
        return None
    trace, propagator = _api()
    found = trace.get_current_span(propagator.extract(carrier)).get_span_context()
    return found if found.is_valid else None


def has_trace(headers: KafkaHeaders) -> bool:
    for name, _ in headers:  # noqa: SIM110 - a loop is faster than any(); once per record
        if name == TRACEPARENT:
            return True
    return False


@dataclass(slots=True)
class OpenSpans:
    """Spans started together and ended together (:meth:`end`); ``keys`` name them (the
    offsets of the records of apply spans)."""

    spans: Sequence[Span] = ()
    keys: Sequence[int] = ()

    def end(self, error: str | None = None, failed: Mapping[int, str] | None = None) -> None:
        """End every span: with status ERROR and ``error`` when given, else those whose
        key ``failed`` names with their own reason."""
        if not self.spans:
            return
        trace, _ = _api()
        now = time.time_ns()
        reasons = failed or {}
        for index, span in enumerate(self.spans):
            reason = error
            if reason is None and self.keys:
                reason = reasons.get(self.keys[index])
            if reason is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, reason))
            span.end(end_time=now)


NO_SPANS = OpenSpans()


def start_publish_span(
    relay_partition: int, topics: Iterable[str], records: Sequence[KafkaHeaders]
) -> OpenSpans:
    """A ``publish`` span for one Kafka transaction of ``records`` (their headers), with
    a link to the trace of each that carries a ``traceparent``."""
    if _api() is None:
        return NO_SPANS
    trace, _ = _api()
    names = sorted(set(topics))
    attributes: dict[str, str | int] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.batch.message_count": len(records),
        "relay.partition": relay_partition,
    }
    if len(names) == 1:
        attributes["messaging.destination.name"] = names[0]
    else:
        attributes["relay.destinations"] = ",".join(names)
    span = _tracer().start_span(
        "publish " + names[0] if len(names) == 1 else "publish",
        kind=trace.SpanKind.PRODUCER,
        attributes=attributes,
    )
    if span.is_recording():
        for headers in records:
            if has_trace(headers) and (context := _context(headers)) is not None:
                span.add_link(context)
    return OpenSpans((span,))


@dataclass(frozen=True, slots=True)
class Applied:
    """A record the mirror applies: where it came from, and its headers."""

    topic: str
    partition: int
    offset: int
    headers: KafkaHeaders


def start_apply_spans(records: Iterable[Applied], group: str | None = None) -> OpenSpans:
    """An ``apply`` span for each of ``records`` that carries a ``traceparent``, a child
    of the span it names."""
    if _api() is None:
        return NO_SPANS
    traced = [record for record in records if has_trace(record.headers)]
    if not traced:
        return NO_SPANS
    trace, _ = _api()
    tracer = _tracer()
    now = time.time_ns()
    spans, offsets = [], []
    for record in traced:
        context = _context(record.headers)
        if context is None:
            continue
        attributes: dict[str, str | int] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "apply",
            "messaging.destination.name": record.topic,
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
        }
        if group is not None:
            attributes["messaging.consumer.group.name"] = group
        spans.append(
            tracer.start_span(
                "apply " + record.topic,
                context=trace.set_span_in_context(trace.NonRecordingSpan(context)),
                kind=trace.SpanKind.CONSUMER,
                attributes=attributes,
                start_time=now,
            )
        )
        offsets.append(record.offset)
    return OpenSpans(spans, offsets)
