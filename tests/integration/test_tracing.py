"""Tracing end to end on the real servers: a trace started in the service shows the
relay's ``publish`` span (linked to it) and the mirror's ``apply`` span (a child of the
service's span), with the OpenTelemetry SDK configured in this process, where the relay
and the mirror run through the command API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy.pool import NullPool

import relay
from relay.commands.mirror import MirrorService
from relay.commands.relay_job import drain_partition, plan_relay_job
from relay.settings.mirror import load_mirror_settings
from relay.settings.relay import load_settings
from tests.integration.mirror_support import items_mapping, items_state, mirror_env
from tests.integration.support import RelayTestEnv
from tests.otel import recorded_spans


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans()


def test_a_trace_started_in_the_service_shows_the_publish_and_apply_spans(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    mirror = mirror_env(
        relay_env.database_url, relay_env.bootstrap_servers, tmp_path, items_mapping([topic])
    )
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    tracer = trace.get_tracer("shop")
    with tracer.start_as_current_span("place order") as service, engine.begin() as conn:
        relay.publish(conn, topic, "7", {"name": "lamp", "qty": 2}, event_type="ItemSet")
    engine.dispose()

    settings = load_settings(environ=relay_env.env())
    for partition in plan_relay_job(settings, None):
        drain_partition(settings, partition)
    MirrorService(load_mirror_settings(environ=mirror.env())).run(once=True)
    assert items_state(mirror) == {7: ("lamp", 2)}

    origin = service.get_span_context()
    finished = spans.get_finished_spans()
    (publish,) = [s for s in finished if s.name == f"publish {topic}"]
    assert publish.kind is SpanKind.PRODUCER
    assert [link.context.span_id for link in publish.links] == [origin.span_id]
    assert [link.context.trace_id for link in publish.links] == [origin.trace_id]
    assert publish.attributes is not None
    assert publish.attributes["messaging.batch.message_count"] == 1
    (applied,) = [s for s in finished if s.name == f"apply {topic}"]
    assert applied.kind is SpanKind.CONSUMER
    assert applied.context.trace_id == origin.trace_id
    assert applied.parent is not None and applied.parent.span_id == origin.span_id
    assert applied.attributes is not None
    assert applied.attributes["messaging.destination.name"] == topic
    assert publish.end_time is not None and applied.start_time is not None
    assert publish.end_time <= applied.start_time  # applied after it was published
