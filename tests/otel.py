"""The OpenTelemetry SDK as a service configures it, for the tests of tracing: the global
tracer provider (set once per process: the API allows no other) and, per test, an
in-memory exporter of what ended during the test."""

from __future__ import annotations

from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """For a fixture: an exporter that gets every span that ends until the test ends."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        exporter.shutdown()  # later spans are dropped, not kept
