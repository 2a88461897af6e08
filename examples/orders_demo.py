"""End-to-end demo: a service writes orders with their events, the relay publishes them,
a read_committed consumer shows what arrived in Kafka, and the mirror applies them to
the table orders_mirror, shown next to the source table orders.

    python examples/orders_demo.py [--keep]  (RELAY_DATABASE_URL / RELAY_KAFKA_BOOTSTRAP_SERVERS)

It creates a fresh demo database next to RELAY_DATABASE_URL's, so it never touches yours,
and a topic of its own; it drops them when it ends (also on an error or Ctrl-C), unless
``--keep`` (or RELAY_DEMO_KEEP=1) asks to keep them for a look.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import relay

ROOT = Path(__file__).resolve().parents[1]
RUN_ID = uuid.uuid4().hex[:8]
TOPIC = f"demo.orders.{RUN_ID}"


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str]
    total_cents: Mapped[int]
    status: Mapped[str]


DATABASE = f"relay_demo_{RUN_ID}"
POSITIONS_GROUP = f"demo-{RUN_ID}-positions"


def keep_asked() -> bool:
    """``--keep`` or RELAY_DEMO_KEEP=1: leave the demo's database and topic behind."""
    return "--keep" in sys.argv[1:] or os.environ.get("RELAY_DEMO_KEEP", "") not in ("", "0")


def create_demo_database(admin_url: str) -> str:
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{DATABASE}"'))
    engine.dispose()
    return sa.make_url(admin_url).set(database=DATABASE).render_as_string(hide_password=False)


def clean_up(admin_url: str, bootstrap: str) -> None:
    """Drop what the demo made: its database, its topic and its positions group. Each
    step on its own: one that fails (a server gone) does not keep the others."""
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)'))
    except sa.exc.SQLAlchemyError as exc:
        print(f"could not drop database {DATABASE}: {exc}", file=sys.stderr)
    finally:
        engine.dispose()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for what, futures in (
        (f"topic {TOPIC}", admin.delete_topics([TOPIC], operation_timeout=30)),
        (f"group {POSITIONS_GROUP}", admin.delete_consumer_groups([POSITIONS_GROUP])),
    ):
        for future in futures.values():
            try:
                future.result(30)
            except KafkaException as exc:
                code = exc.args[0].code()
                if code not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.GROUP_ID_NOT_FOUND):
                    print(f"could not delete {what}: {exc}", file=sys.stderr)
    print(f"cleaned up: database {DATABASE}, topic {TOPIC} (--keep keeps them)")


def ensure_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if TOPIC in admin.list_topics(timeout=10).topics:
        return
    admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1)])[TOPIC].result(30)


def service_writes_orders(engine: sa.Engine, rng: random.Random) -> None:
    """The 'service': each order and its event commit in one transaction."""
    customers = ["ada", "grace", "linus", "margaret"]
    for order_id in range(1, 9):
        with Session(engine) as session, session.begin():
            order = Order(
                id=order_id,
                customer=rng.choice(customers),
                total_cents=rng.randint(500, 50_000),
                status="placed",
            )
            session.add(order)
            relay.publish(
                session,
                TOPIC,
                key=f"order-{order_id}",
                value={
                    "id": order_id,
                    "customer": order.customer,
                    "total_cents": order.total_cents,
                    "status": "placed",
                },
                event_type="OrderPlaced",
            )
    # An order that fails validation: its transaction rolls back and no event exists.
    try:
        with Session(engine) as session, session.begin():
            session.add(Order(id=99, customer="mallory", total_cents=-1, status="placed"))
            relay.publish(session, TOPIC, "order-99", {"id": 99}, event_type="OrderPlaced")
            raise ValueError("negative total")
    except ValueError:
        print("order 99 rejected: its transaction rolled back, so no event was written")
    with Session(engine) as session, session.begin():
        order = session.get_one(Order, 3)
        order.status = "shipped"
        relay.publish(  # the full row: the mirror upserts whole rows
            session,
            TOPIC,
            "order-3",
            {
                "id": 3,
                "customer": order.customer,
                "total_cents": order.total_cents,
                "status": "shipped",
            },
            event_type="OrderShipped",
        )


def read_events(bootstrap: str, expected: int) -> list[tuple[int, int, str, str, str]]:
    """The topic's committed events, read until ``expected`` arrived or every partition
    is at its end with none missing (a commit's markers may reach a partition an instant
    after the commit returned: its end is below the records until then)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    partitions = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in partitions])
    pending, events = set(partitions), []
    deadline = time.monotonic() + 30
    while (pending or len(events) < expected) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                pending.discard(msg.partition())
            continue
        headers = dict(msg.headers() or [])
        events.append(
            (
                msg.partition(),
                msg.offset(),
                msg.key().decode(),
                headers["event-type"].decode(),
                msg.value().decode(),
            )
        )
    consumer.close()
    return events


def create_mirrored_table(database_url: str) -> None:
    """Run the example Alembic revision (examples/orders_mirror_migration.py)."""
    import importlib.util

    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    spec = importlib.util.spec_from_file_location(
        "orders_mirror_migration", ROOT / "examples" / "orders_mirror_migration.py"
    )
    if spec is None or spec.loader is None:
        raise RuntimeError("examples/orders_mirror_migration.py not found")
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    engine = sa.create_engine(database_url)
    with engine.begin() as conn, Operations.context(MigrationContext.configure(conn)):
        migration.upgrade()
    engine.dispose()


def write_mirror_mapping(directory: Path) -> Path:
    """examples/mirror.toml, for this run's topic."""
    text = (ROOT / "examples" / "mirror.toml").read_text()
    path = directory / "mirror.toml"
    path.write_text(text.replace('"demo.orders"', f'"{TOPIC}"'))
    return path


def show_side_by_side(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        source = conn.execute(
            sa.text("SELECT id, customer, total_cents, status FROM orders ORDER BY id")
        ).all()
        mirrored = conn.execute(
            sa.text(
                "SELECT id, customer, total_cents, status, source_seq "
                "FROM orders_mirror ORDER BY id"
            )
        ).all()
    by_id = {row.id: row for row in mirrored}
    print(f"   {'orders (source)':<33} | orders_mirror")
    print(
        f"   {'id':>3} {'customer':<9} {'total':>9} {'status':<9} | "
        f"{'id':>3} {'customer':<9} {'total':>9} {'status':<9} {'seq':>4}"
    )
    for row in source:
        copy = by_id.get(row.id)
        right = (
            f"{copy.id:>3} {copy.customer:<9} {copy.total_cents / 100:>9.2f} {copy.status:<9} "
            f"{copy.source_seq:>4}"
            if copy is not None
            else "(missing)"
        )
        print(
            f"   {row.id:>3} {row.customer:<9} {row.total_cents / 100:>9.2f} {row.status:<9} | "
            + right
        )
    return [tuple(r) for r in source] == [tuple(r)[:4] for r in mirrored]


def main() -> int:
    admin_url = os.environ["RELAY_DATABASE_URL"]
    bootstrap = os.environ["RELAY_KAFKA_BOOTSTRAP_SERVERS"]
    try:
        return run_demo(admin_url, bootstrap)
    finally:  # also on an error or Ctrl-C
        if keep_asked():
            print(f"kept: database {DATABASE}, topic {TOPIC}")
        else:
            clean_up(admin_url, bootstrap)


def run_demo(admin_url: str, bootstrap: str) -> int:
    print(f"0. a demo database {DATABASE} and topic {TOPIC}")
    database_url = create_demo_database(admin_url)
    env = {
        **os.environ,
        "RELAY_DATABASE_URL": database_url,
        "RELAY_TRANSACTIONAL_ID_PREFIX": f"demo-{RUN_ID}",
        "RELAY_POSITIONS_GROUP": POSITIONS_GROUP,
    }
    relay_cli = [sys.executable, "-m", "relay.cli"]
    print("1. migrations:  relay db upgrade")
    subprocess.run([*relay_cli, "db", "upgrade"], env=env, check=True, cwd=ROOT)
    engine = sa.create_engine(database_url)
    Base.metadata.create_all(engine)
    ensure_topic(bootstrap)

    print("2. the service writes orders and their events in one transaction each")
    service_writes_orders(engine, random.Random(1))
    with engine.connect() as conn:
        pending = conn.execute(sa.text("SELECT count(*) FROM outbox")).scalar_one()
    print(f"   outbox rows waiting: {pending}")

    print("3. the relay publishes them:  relay run --once")
    subprocess.run(
        [*relay_cli, "--log-level", "WARNING", "run", "--once"], env=env, check=True, cwd=ROOT
    )

    print(f"4. a read_committed consumer reads topic {TOPIC}:")
    print(f"   {'partition':>9} {'offset':>6}  {'key':<9} {'event':<13} value")
    events = read_events(bootstrap, pending)
    for partition, offset, key, event_type, value in events:
        print(f"   {partition:>9} {offset:>6}  {key:<9} {event_type:<13} {value}")
    print(
        f"{len(events)} events in Kafka, {pending} committed: "
        + ("exactly once" if len(events) == pending else "MISMATCH")
    )

    print("5. the mirrored table comes from an Alembic migration (orders_mirror_migration.py)")
    create_mirrored_table(database_url)
    with tempfile.TemporaryDirectory() as scratch:
        mapping = write_mirror_mapping(Path(scratch))
        print("6. the mirror applies the events to it:  relay mirror --once")
        mirror_env = {
            **env,
            "RELAY_MIRROR_CONFIG": str(mapping),
            "RELAY_MIRROR_GROUP": f"demo-{RUN_ID}-mirror",
        }
        subprocess.run(
            [*relay_cli, "--log-level", "WARNING", "mirror", "--once"],
            env=mirror_env,
            check=True,
            cwd=ROOT,
        )
    print("7. the source table next to the mirrored table:")
    same = show_side_by_side(engine)
    engine.dispose()
    print("orders_mirror " + ("equals orders" if same else "DIFFERS from orders"))
    return 0 if len(events) == pending and same else 1


if __name__ == "__main__":
    sys.exit(main())
