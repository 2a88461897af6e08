"""A service that writes its order events as Avro through a schema registry; the relay
publishes them without knowing the format; a plain consumer decodes them with
confluent-kafka's AvroDeserializer.

    python examples/avro_orders.py [--keep]
    (RELAY_DATABASE_URL / RELAY_KAFKA_BOOTSTRAP_SERVERS; RELAY_SCHEMA_REGISTRY_URL,
     _USER, _PASSWORD for your registry)

Needs the extra ``outbox-relay[registry]``. Without RELAY_SCHEMA_REGISTRY_URL it uses
confluent-kafka's in-process registry (``mock://``), which lives in this process only:
the schema is registered there, as your deployment pipeline would register it in yours.
Like examples/orders_demo.py (whose helpers it shares) it makes a database and a topic of
its own and drops them when it ends, unless ``--keep``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import sqlalchemy as sa
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from orders_demo import (  # examples/ is this script's directory, so on sys.path
    DATABASE,
    POSITIONS_GROUP,
    ROOT,
    RUN_ID,
    TOPIC,
    Base,
    Order,
    clean_up,
    create_demo_database,
    ensure_topic,
    keep_asked,
)
from sqlalchemy.orm import Session

import relay
from relay.kafka.schema_formats import SchemaRegistry

ORDER_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "OrderPlaced",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": "string"},
            {"name": "total_cents", "type": "long"},
        ],
    }
)


def registry() -> SchemaRegistry:
    """Yours (RELAY_SCHEMA_REGISTRY_*), or the in-process one with the schema registered."""
    if os.environ.get("RELAY_SCHEMA_REGISTRY_URL"):
        return relay.schema_registry()
    client = SchemaRegistryClient.new_client({"url": "mock://avro-orders"})
    client.register_schema(f"{TOPIC}-value", Schema(ORDER_SCHEMA, "AVRO"))
    return SchemaRegistry(client, "mock://avro-orders")


def read_back(bootstrap: str, reg: SchemaRegistry, expected: int) -> list[dict[str, object]]:
    """The topic's records through a plain read_committed consumer and AvroDeserializer."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"avro-orders-{RUN_ID}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([TOPIC])
    deserialize = AvroDeserializer(reg.client)
    orders: list[dict[str, object]] = []
    deadline = time.monotonic() + 30
    try:
        while len(orders) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            ctx = SerializationContext(TOPIC, MessageField.VALUE)
            orders.append(deserialize(message.value(), ctx))
    finally:
        consumer.close()
    return orders


def run(admin_url: str, bootstrap: str) -> int:
    reg = registry()
    orders = relay.avro_format(ORDER_SCHEMA, reg)  # looks the schema up; never registers
    print(f"0. a demo database {DATABASE} and topic {TOPIC}; registry {reg.shown_url}")
    database_url = create_demo_database(admin_url)
    env = {
        **os.environ,
        "RELAY_DATABASE_URL": database_url,
        "RELAY_TRANSACTIONAL_ID_PREFIX": f"demo-{RUN_ID}",
        "RELAY_POSITIONS_GROUP": POSITIONS_GROUP,
    }
    relay_cli = [sys.executable, "-m", "relay.cli", "--log-level", "WARNING"]
    subprocess.run([*relay_cli, "db", "upgrade"], env=env, check=True, cwd=ROOT)
    engine = sa.create_engine(database_url)
    Base.metadata.create_all(engine)
    ensure_topic(bootstrap)

    print("1. the service writes each order and its Avro event in one transaction")
    placed = [(n, name, 1000 * n + 99) for n, name in enumerate(["ada", "grace", "linus"], 1)]
    for order_id, customer, cents in placed:
        with Session(engine) as session, session.begin():
            session.add(Order(id=order_id, customer=customer, total_cents=cents, status="placed"))
            event = {"id": order_id, "customer": customer, "total_cents": cents}
            relay.publish(
                session, TOPIC, f"order-{order_id}", event, event_type="OrderPlaced",
                value_format=orders,
            )  # fmt: skip
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT value FROM outbox ORDER BY id")).scalars().all()
    engine.dispose()
    print(f"   the outbox holds the wire format, e.g. {bytes(stored[0])[:12].hex(' ')} ...")

    print("2. the relay publishes the bytes as they are:  relay run --once")
    subprocess.run([*relay_cli, "run", "--once"], env=env, check=True, cwd=ROOT)

    print("3. a plain consumer decodes them with AvroDeserializer:")
    got = sorted(read_back(bootstrap, reg, len(placed)), key=lambda order: str(order["id"]))
    for order in got:
        print(f"   {order}")
    same = got == [{"id": i, "customer": c, "total_cents": t} for i, c, t in placed]
    print("decoded unchanged" if same else "MISMATCH")
    return 0 if same else 1


def main() -> int:
    admin_url = os.environ["RELAY_DATABASE_URL"]
    bootstrap = os.environ["RELAY_KAFKA_BOOTSTRAP_SERVERS"]
    try:
        return run(admin_url, bootstrap)
    finally:  # also on an error or Ctrl-C
        if keep_asked():
            print(f"kept: database {DATABASE}, topic {TOPIC}")
        else:
            clean_up(admin_url, bootstrap)


if __name__ == "__main__":
    sys.exit(main())
