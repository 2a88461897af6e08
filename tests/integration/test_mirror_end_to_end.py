"""End to end, both directions: concurrent service transactions write business rows and
their events (relay.publish), `relay run --once` publishes them, `relay mirror --once`
applies them; the mirrored tables equal the source tables, row for row. The mirror runs
under a login role of the least-privilege group `outbox_mirror`."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

import relay
from tests.integration.mirror_support import MirrorEnv, run_script
from tests.integration.support import RelayTestEnv, run_relay

THREADS = 8
TRANSACTIONS = 40
ORDERS = 60

DDL = """
CREATE TABLE orders (
    id integer PRIMARY KEY, customer text NOT NULL, total_cents bigint NOT NULL,
    status text NOT NULL, placed_at timestamptz NOT NULL, tags jsonb);
CREATE TABLE customers (
    region text, name text, tier text NOT NULL, credit numeric(12, 2),
    PRIMARY KEY (region, name));
CREATE TABLE orders_mirror (
    id integer PRIMARY KEY, customer text NOT NULL, total_cents bigint NOT NULL,
    status text NOT NULL, placed_at timestamptz NOT NULL, tags jsonb,
    source_seq bigint NOT NULL);
CREATE TABLE customers_mirror (
    region text, name text, tier text NOT NULL, credit numeric(12, 2),
    source_seq bigint NOT NULL, PRIMARY KEY (region, name));
"""


def mapping(orders_topic: str, customers_topic: str) -> str:
    return f"""
[[tables]]
table = "orders_mirror"
topics = ["{orders_topic}"]
event_types = ["OrderPlaced", "OrderChanged", "OrderDeleted"]
key = {{ pattern = '^order-(?P<id>[0-9]+)$' }}
version = {{ column = "source_seq", source = "header:outbox-seq" }}

[tables.columns]
customer = "customer"
total_cents = "total_cents"
status = "status"
placed_at = "placed_at"
tags = "tags"

[[tables]]
table = "customers_mirror"
topics = ["{customers_topic}"]
key = {{ fields = {{ region = "region", name = "name" }} }}
version = {{ column = "source_seq" }}
columns = {{ tier = "tier", credit = "credit" }}
"""


class Service:
    """Writes orders and customers, each change with its event in one transaction."""

    def __init__(self, url: str, orders_topic: str, customers_topic: str, seed: int) -> None:
        self.engine = sa.create_engine(url, poolclass=NullPool)
        self.orders_topic, self.customers_topic = orders_topic, customers_topic
        self.rng = random.Random(seed)

    def run(self) -> None:
        for _ in range(TRANSACTIONS):
            while True:
                try:
                    with Session(self.engine) as session, session.begin():
                        if self.rng.random() < 0.75:
                            self.change_order(session)
                        else:
                            self.change_customer(session)
                        if self.rng.random() < 0.05:
                            raise _RollBack  # its events must never appear
                    break
                except _RollBack:
                    break
                except OperationalError:  # deadlock or serialization: retry
                    continue
        self.engine.dispose()

    def change_order(self, session: Session) -> None:
        order_id = self.rng.randrange(ORDERS)
        session.execute(sa.text("SELECT pg_advisory_xact_lock(42, :id)"), {"id": order_id})
        row = session.execute(
            sa.text(
                "SELECT customer, total_cents, status, placed_at, tags FROM orders WHERE id = :id"
            ),
            {"id": order_id},
        ).one_or_none()
        key = f"order-{order_id}"
        if row is not None and self.rng.random() < 0.15:
            session.execute(sa.text("DELETE FROM orders WHERE id = :id"), {"id": order_id})
            relay.publish(session, self.orders_topic, key, None, event_type="OrderDeleted")
            return
        values = {
            "id": order_id,
            "customer": self.rng.choice(["ada", "grace", "linus", "barbara"]),
            "total_cents": self.rng.randrange(100, 10**9),
            "status": self.rng.choice(["placed", "paid", "shipped"]),
            "placed_at": datetime(2026, 1, 1, tzinfo=UTC)
            + timedelta(seconds=self.rng.randrange(10**7), microseconds=self.rng.randrange(10**6)),
            "tags": self.rng.choice([None, ["gift"], {"channel": "web", "n": 3}]),
        }
        session.execute(
            sa.text(
                "INSERT INTO orders VALUES (:id, :customer, :total_cents, :status, :placed_at, "
                "CAST(:tags AS jsonb)) ON CONFLICT (id) DO UPDATE SET "
                "customer = EXCLUDED.customer, total_cents = EXCLUDED.total_cents, "
                "status = EXCLUDED.status, placed_at = EXCLUDED.placed_at, tags = EXCLUDED.tags"
            ),
            {**values, "tags": None if values["tags"] is None else json.dumps(values["tags"])},
        )
        event = {**values, "placed_at": values["placed_at"].isoformat()}  # type: ignore[attr-defined]
        relay.publish(
            session,
            self.orders_topic,
            key,
            event,
            event_type="OrderPlaced" if row is None else "OrderChanged",
        )
        if self.rng.random() < 0.2:  # an event type the mirror does not take
            relay.publish(session, self.orders_topic, key, {"id": order_id}, event_type="Viewed")

    def change_customer(self, session: Session) -> None:
        region, name = self.rng.choice(["eu", "us"]), f"c{self.rng.randrange(20)}"
        tier = self.rng.choice(["gold", "silver"])
        credit = None if self.rng.random() < 0.2 else Decimal(self.rng.randrange(10**6)) / 100
        session.execute(
            sa.text(
                "INSERT INTO customers VALUES (:r, :n, :t, :c) ON CONFLICT (region, name) "
                "DO UPDATE SET tier = EXCLUDED.tier, credit = EXCLUDED.credit"
            ),
            {"r": region, "n": name, "t": tier, "c": credit},
        )
        relay.publish(
            session,
            self.customers_topic,
            json.dumps({"region": region, "name": name}),
            {
                "region": region,
                "name": name,
                "tier": tier,
                "credit": None if credit is None else str(credit),
            },
            event_type="CustomerChanged",
        )


class _RollBack(Exception):
    pass


def test_concurrent_service_writes_end_up_equal_in_the_mirrored_tables(
    relay_env: RelayTestEnv,
    login_roles: dict[str, str],
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    orders_topic = make_topic("e2e-orders", partitions=3)
    customers_topic = make_topic("e2e-customers", partitions=2)
    run_script(relay_env.database_url, DDL)
    services = [
        Service(relay_env.database_url, orders_topic, customers_topic, seed)
        for seed in range(THREADS)
    ]
    threads = [threading.Thread(target=s.run) for s in services]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert relay_env.sql("SELECT count(*) FROM outbox")[0][0] > THREADS * TRANSACTIONS // 2

    published = run_relay(relay_env, "run", "--once")
    assert published.returncode == 0, published.stderr
    granted = run_relay(
        relay_env, "db", "roles", "--mirror-tables", "orders_mirror,customers_mirror"
    )
    assert granted.returncode == 0, granted.stderr

    (tmp_path / "mirror.toml").write_text(mapping(orders_topic, customers_topic))
    mirror = MirrorEnv(
        login_roles["outbox_mirror"], relay_env.bootstrap_servers, tmp_path / "mirror.toml", "e2e"
    )
    applied = mirror.run("--once")
    assert applied.returncode == 0, applied.stderr
    assert "dead-lettered 0" in applied.stdout

    columns = "id, customer, total_cents, status, placed_at, tags"
    orders = relay_env.sql(f"SELECT {columns} FROM orders ORDER BY id")
    assert len(orders) > ORDERS // 2
    assert relay_env.sql(f"SELECT {columns} FROM orders_mirror ORDER BY id") == orders
    columns = "region, name, tier, credit"
    customers = relay_env.sql(f"SELECT {columns} FROM customers ORDER BY 1, 2")
    assert relay_env.sql(f"SELECT {columns} FROM customers_mirror ORDER BY 1, 2") == customers
