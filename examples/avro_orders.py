"""A service that writes its order events as Avro through a schema registry; the relay
publishes them without knowing the format; a plain consumer decodes them with
confluent-kafka's AvroDeserializer, and the mirror applies them to typed columns.

    python examples/avro_orders.py [--keep]
    (RELAY_DATABASE_URL / RELAY_KAFKA_BOOTSTRAP_SERVERS; RELAY_SCHEMA_REGISTRY_URL,
     _USER, _PASSWORD for your registry)

Needs the extra ``outbox-relay[registry]``. Without RELAY_SCHEMA_REGISTRY_URL it serves
the development stand-in registry (relay.devenv.registry, never for production) on
127.0.0.1 for its own run, and registers the schema there, as your deployment pipeline
would register it in yours.
Like examples/orders_demo.py (whose helpers it shares) it makes a database and a topic of
its own and drops them when it ends, unless ``--keep``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from confluent_kafka import Consumer
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
from relay.devenv.registry import local_registry
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


MIRROR_DDL = """
CREATE TABLE orders_avro_mirror (
    id bigint PRIMARY KEY,
    customer text NOT NULL,
    total_cents bigint NOT NULL,
    source_seq bigint NOT NULL
)
"""
MIRROR_MAPPING = """
[[tables]]
table = "orders_avro_mirror"
topics = ["{topic}"]
format = "avro"                      # decoded through the schema registry
key = {{ pattern = '^order-(?P<id>[0-9]+)$' }}
version = {{ column = "source_seq", source = "header:outbox-seq" }}

[tables.columns]                     # table column = field of the Avro record
customer = "customer"
total_cents = "total_cents"
"""


@contextmanager
def registry_url() -> Iterator[str]:
    """Yours (RELAY_SCHEMA_REGISTRY_URL), or the development stand-in for this run, with
    the order schema registered."""
    if os.environ.get("RELAY_SCHEMA_REGISTRY_URL"):
        yield os.environ["RELAY_SCHEMA_REGISTRY_URL"]
        return
    with local_registry() as local:
        local.register(f"{TOPIC}-value", ORDER_SCHEMA)
        yield local.url


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


def run(admin_url: str, bootstrap: str, url: str) -> int:
    os.environ.setdefault("RELAY_SCHEMA_REGISTRY_URL", url)
    reg = relay.schema_registry()
    orders = relay.avro_format(ORDER_SCHEMA, reg)  # looks the schema up; never registers
    print(f"0. a demo database {DATABASE} and topic {TOPIC}; registry {reg.shown_url}")
    database_url = create_demo_database(admin_url)
    env = {
        **os.environ,
        "RELAY_SCHEMA_REGISTRY_URL": url,
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

    print("4. the mirror decodes them through the registry into typed columns:")
    print('   relay mirror --once  (format = "avro" in the mapping)')
    engine = sa.create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(sa.text(MIRROR_DDL))
    with tempfile.TemporaryDirectory() as scratch:
        mapping = Path(scratch) / "mirror.toml"
        mapping.write_text(MIRROR_MAPPING.format(topic=TOPIC))
        mirror_env = {
            **env,
            "RELAY_MIRROR_CONFIG": str(mapping),
            "RELAY_MIRROR_GROUP": f"demo-{RUN_ID}-avro-mirror",
        }
        subprocess.run([*relay_cli, "mirror", "--once"], env=mirror_env, check=True, cwd=ROOT)
    with engine.connect() as conn:
        mirrored = conn.execute(
            sa.text("SELECT id, customer, total_cents FROM orders_avro_mirror ORDER BY id")
        ).all()
    engine.dispose()
    for row in mirrored:
        print(f"   {tuple(row)}")
    applied = [tuple(row) for row in mirrored] == placed
    print("orders_avro_mirror equals the events" if applied else "orders_avro_mirror DIFFERS")
    return 0 if same and applied else 1


def main() -> int:
    admin_url = os.environ["RELAY_DATABASE_URL"]
    bootstrap = os.environ["RELAY_KAFKA_BOOTSTRAP_SERVERS"]
    try:
        with registry_url() as url:
            return run(admin_url, bootstrap, url)
    finally:  # also on an error or Ctrl-C
        if keep_asked():
            print(f"kept: database {DATABASE}, topic {TOPIC}")
        else:
            clean_up(admin_url, bootstrap)


if __name__ == "__main__":
    sys.exit(main())
