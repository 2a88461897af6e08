"""Write path with a schema registry format: what serializing an event as Avro (in the
service's transaction, docs/formats.md) costs against JSON.

One client writes one order event per transaction through ``relay.publish`` on a pooled
SQLAlchemy engine, in windows that alternate JSON (the peer) and Avro (ours, through
confluent-kafka's ``AvroSerializer``); the median window of each counts. The registry is
the client's in-process ``mock://`` one: after the first event the serializer's schema id
is cached, so a real registry costs the same per event (one lookup per process). Also
measured: the serialization alone (``outbox_rows``, no database), in microseconds.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import sqlalchemy as sa

import relay
from relay.publishing.events import Event, outbox_rows

from .common import Outcome, Row, log, scratch_database

ORDER_SCHEMA = """{"type": "record", "name": "Order", "namespace": "bench", "fields": [
  {"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
  {"name": "status", "type": "string"}, {"name": "total_cents", "type": "long"},
  {"name": "items", "type": {"type": "array", "items": "string"}}]}"""
TOPIC = "bench-orders"


def _order(n: int) -> dict[str, Any]:
    return {
        "id": n,
        "customer": f"customer-{n % 997}",
        "status": "placed",
        "total_cents": 1999 + n % 50_000,
        "items": [f"sku-{n % 13}", f"sku-{n % 31}"],
    }


def _window(engine: sa.Engine, value_format: Any, start: int, count: int) -> float:
    """Transactions per second of ``count`` one-event transactions."""
    began = time.perf_counter()
    for n in range(start, start + count):
        with engine.begin() as conn:
            relay.publish(conn, TOPIC, f"order-{n}", _order(n), value_format=value_format)
    return count / (time.perf_counter() - began)


def _serialization_us(value_format: Any, count: int) -> float:
    events = [Event(TOPIC, f"order-{n}", _order(n)) for n in range(count)]
    began = time.perf_counter()
    outbox_rows(events, value_format=value_format)
    return (time.perf_counter() - began) / count * 1e6


def run(admin_url: str, quick: bool) -> Outcome:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    per_window, windows = (300, 3) if quick else (2000, 5)
    client = SchemaRegistryClient.new_client({"url": "mock://bench"})
    avro = relay.avro_format(ORDER_SCHEMA, client, auto_register=True)
    tps: dict[str, list[float]] = {"json": [], "avro": []}
    with scratch_database(admin_url, "bench_formats") as url:
        engine = sa.create_engine(url, pool_size=1)
        try:
            _window(engine, avro, 0, 50)  # warm-up: connection, registration, caches
            _window(engine, None, 50, 50)
            start = 100
            for _ in range(windows):
                for kind, value_format in (("json", None), ("avro", avro)):
                    tps[kind].append(_window(engine, value_format, start, per_window))
                    start += per_window
        finally:
            engine.dispose()
    median = {kind: statistics.median(figures) for kind, figures in tps.items()}
    serialization = {
        "json": _serialization_us(None, 5000),
        "avro": _serialization_us(avro, 5000),
    }
    log(
        f"formats: one event per transaction, JSON {median['json']:.0f} tps, Avro"
        f" {median['avro']:.0f} tps; serialization alone JSON {serialization['json']:.1f} us,"
        f" Avro {serialization['avro']:.1f} us per event"
    )
    outcome = Outcome()
    outcome.rows.append(
        Row(
            "write tps, one event per txn, Avro (ours) vs JSON",
            median["avro"],
            median["json"],
            "tps",
        )
    )
    outcome.rows.append(
        Row(
            "serialize one event, Avro (ours) vs JSON",
            serialization["avro"],
            serialization["json"],
            "us",
        )
    )
    outcome.headline["write_path_avro_vs_json"] = round(median["avro"] / median["json"], 3)
    outcome.raw["write_path_avro_vs_json"] = {
        "transactions_per_window": per_window,
        "tps_windows": tps,
        "tps_median": median,
        "serialization_us_per_event": serialization,
    }
    return outcome
