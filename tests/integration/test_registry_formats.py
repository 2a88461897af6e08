"""Schema Registry formats end to end on the real PostgreSQL and Kafka, with the local
stand-in registry (relay.devenv.registry, basic auth on): a service writes Avro,
Protobuf and JSON Schema events through the write API, ``relay run --once`` publishes
them, and a plain confluent-kafka consumer with the registry's deserializers reads them
unchanged. A registry outage and a value the schema refuses fail the service's write,
and the outbox stays as it was."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer, Message
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from sqlalchemy.pool import NullPool

import relay
from relay.devenv import Endpoints
from relay.devenv.databases import libpq_url
from relay.devenv.registry import LocalRegistry, local_registry
from relay.devenv.waiting import wait_until
from relay.kafka.schema_formats import SchemaRegistry
from tests.integration.support import PROJECT_ROOT, RelayTestEnv, run_relay
from tests.schema_examples import ORDER_AVRO, ORDER_JSON_SCHEMA, OrderMessage

USER, PASSWORD = "svc", "pw-7c1e"


@pytest.fixture
def standin() -> Iterator[LocalRegistry]:
    with local_registry(user=USER, password=PASSWORD) as registry:
        yield registry


def _env(standin: LocalRegistry) -> dict[str, str]:
    return {
        "RELAY_SCHEMA_REGISTRY_URL": standin.url,
        "RELAY_SCHEMA_REGISTRY_USER": USER,
        "RELAY_SCHEMA_REGISTRY_PASSWORD": PASSWORD,
        "RELAY_SCHEMA_REGISTRY_RETRIES": "0",
    }


def _client(standin: LocalRegistry) -> SchemaRegistryClient:
    """The consumer side's own client, as any other team would configure it."""
    return SchemaRegistryClient({"url": standin.url, "basic.auth.user.info": f"{USER}:{PASSWORD}"})


def _consume(bootstrap_servers: str, topic: str, count: int) -> list[Message]:
    """``count`` records of ``topic`` with a plain read_committed consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"registry-test-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    records: list[Message] = []

    def enough() -> bool:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            records.append(message)
        return len(records) >= count

    try:
        wait_until(enough, 60, f"{count} records in {topic}", interval=0)
    finally:
        consumer.close()
    return records


def _publish(relay_env: RelayTestEnv, write: Callable[[sa.Connection], Any]) -> None:
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            write(conn)
    finally:
        engine.dispose()


def _outbox(relay_env: RelayTestEnv) -> list[tuple[object, ...]]:
    return relay_env.sql("SELECT id, topic, key, value FROM outbox ORDER BY id")


def test_avro_events_reach_a_plain_avro_consumer_unchanged(
    relay_env: RelayTestEnv, topic: str, standin: LocalRegistry
) -> None:
    value_id = standin.register(f"{topic}-value", ORDER_AVRO)  # the deployment pipeline's
    standin.register(f"{topic}-key", '"string"')
    registry = relay.schema_registry(environ=_env(standin))
    orders = relay.avro_format(ORDER_AVRO, registry)
    keys = relay.avro_format('"string"', registry)
    sent = [{"id": n, "customer": f"c{n}", "total": n * 1.5} for n in range(5)]

    def write(conn: sa.Connection) -> None:
        for order in sent:
            relay.publish(
                conn, topic, f"order-{order['id']}", order, value_format=orders, key_format=keys
            )

    _publish(relay_env, write)
    stored = _outbox(relay_env)
    assert all(bytes(value)[:5] == b"\0" + value_id.to_bytes(4, "big") for *_, value in stored)  # type: ignore[arg-type]

    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr
    records = _consume(relay_env.bootstrap_servers, topic, len(sent))

    client = _client(standin)
    values, keys_read = AvroDeserializer(client), AvroDeserializer(client)
    got = {
        keys_read(r.key(), SerializationContext(topic, MessageField.KEY)): values(
            r.value(), SerializationContext(topic, MessageField.VALUE)
        )
        for r in records
    }
    assert got == {f"order-{o['id']}": o for o in sent}
    # the bytes in Kafka are the bytes the outbox held, byte for byte
    assert sorted(r.value() for r in records) == sorted(bytes(v) for *_, v in stored)  # type: ignore[arg-type]


def test_protobuf_and_json_schema_round_trip(
    relay_env: RelayTestEnv, make_topic: Callable[..., str], standin: LocalRegistry
) -> None:
    proto_topic, json_topic = make_topic(), make_topic()
    registry = relay.schema_registry(environ=_env(standin))
    proto = relay.protobuf_format(OrderMessage, registry, auto_register=True)
    schema = relay.json_schema_format(ORDER_JSON_SCHEMA, registry, auto_register=True)
    message = OrderMessage(id=7, customer="ada", total=12.5)
    document = {"id": 8, "customer": "bob", "total": 3.0}

    _publish(
        relay_env, lambda conn: relay.publish(conn, proto_topic, "p", message, value_format=proto)
    )

    async def write_async() -> None:  # the asyncio API, through psycopg directly
        async with await psycopg.AsyncConnection.connect(libpq_url(relay_env.database_url)) as conn:
            await relay.publish_async(conn, json_topic, "j", document, value_format=schema)

    asyncio.run(write_async())
    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr

    [proto_record] = _consume(relay_env.bootstrap_servers, proto_topic, 1)
    [json_record] = _consume(relay_env.bootstrap_servers, json_topic, 1)
    client = _client(standin)
    proto_read = ProtobufDeserializer(OrderMessage, {"use.deprecated.format": False}, client)
    ctx = SerializationContext(proto_topic, MessageField.VALUE)
    assert proto_read(proto_record.value(), ctx) == message
    json_read = JSONDeserializer(None, schema_registry_client=client)
    ctx = SerializationContext(json_topic, MessageField.VALUE)
    assert json_read(json_record.value(), ctx) == document


def test_a_registry_outage_fails_the_write_and_leaves_the_outbox_unchanged(
    relay_env: RelayTestEnv, topic: str
) -> None:
    down = LocalRegistry(user=USER, password=PASSWORD)
    down.register(f"{topic}-value", ORDER_AVRO)
    registry = relay.schema_registry(environ=_env(down))
    orders = relay.avro_format(ORDER_AVRO, registry)
    _publish(relay_env, lambda conn: relay.publish(conn, topic, "before", {"n": 0}))
    before = _outbox(relay_env)
    down.stop()  # the registry is down

    def write(conn: sa.Connection) -> None:
        relay.publish(conn, topic, "json-first", {"n": 1})  # same transaction, rolled back
        relay.publish(conn, topic, "o-1", {"id": 1, "customer": "a", "total": 1.0},
                      value_format=orders)  # fmt: skip

    with pytest.raises(relay.SchemaRegistryUnavailableError, match="unreachable") as caught:
        _publish(relay_env, write)
    assert PASSWORD not in str(caught.value)
    assert _outbox(relay_env) == before


def test_a_value_the_schema_refuses_fails_the_write_and_nothing_is_written(
    relay_env: RelayTestEnv, topic: str, standin: LocalRegistry
) -> None:
    standin.register(f"{topic}-value", ORDER_AVRO)
    registry: SchemaRegistry = relay.schema_registry(environ=_env(standin))
    orders = relay.avro_format(ORDER_AVRO, registry)
    good = {"id": 1, "customer": "a", "total": 1.0}
    bad = {"id": "two", "customer": "b", "total": 2.0}

    def write(conn: sa.Connection) -> None:
        relay.publish_many(
            conn, [relay.Event(topic, "ok", good), relay.Event(topic, "bad", bad)],
            value_format=orders,
        )  # fmt: skip

    with pytest.raises(relay.SerializationError, match="does not fit its Avro schema"):
        _publish(relay_env, write)
    unregistered = relay.avro_format(ORDER_AVRO, registry)
    with pytest.raises(relay.SerializationError, match="not registered"):
        _publish(
            relay_env,
            lambda conn: relay.publish(
                conn, f"{topic}-other", "k", good, value_format=unregistered
            ),
        )
    assert _outbox(relay_env) == []


def test_the_avro_example_service_runs_end_to_end(endpoints: Endpoints) -> None:
    """examples/avro_orders.py: written as Avro, published as it is, decoded unchanged by a
    plain consumer, and applied by the mirror to typed columns, through the development
    stand-in registry it serves itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        RELAY_DATABASE_URL=endpoints.admin_database_url,
        RELAY_KAFKA_BOOTSTRAP_SERVERS=endpoints.bootstrap_servers,
        PYTHONPATH=str(PROJECT_ROOT),  # this checkout's relay, also from a worktree
    )
    result = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "examples" / "avro_orders.py")],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "decoded unchanged" in result.stdout
    assert "orders_avro_mirror equals the events" in result.stdout
    assert "   (2, 'grace', 2099)" in result.stdout  # typed columns: bigint, text, bigint
    assert "WARNING" not in result.stdout + result.stderr
    assert "the outbox holds the wire format, e.g. 00 00 00 00 01" in result.stdout
    assert "cleaned up: database" in result.stdout
