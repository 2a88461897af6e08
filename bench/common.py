"""What the benchmarks share: the servers, a fresh migrated database, the results file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import sqlalchemy as sa

from relay.postgres import migrations
from relay.runtime.secrets import Secret

ROOT = Path(__file__).resolve().parents[1]


def endpoints() -> tuple[str, str]:
    """(admin database URL, bootstrap servers): RELAY_* variables, else `relay dev up`."""
    url = os.environ.get("RELAY_DATABASE_URL")
    bootstrap = os.environ.get("RELAY_KAFKA_BOOTSTRAP_SERVERS")
    if url and bootstrap:
        return url, bootstrap
    from relay import devenv

    found = devenv.up()
    return found.admin_database_url, found.bootstrap_servers


def fresh_database(admin_url: str, name: str, setup_sql: str) -> str:
    """Create database ``name``, apply the migrations, run ``setup_sql``; returns its URL."""
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    migrations.upgrade(Secret(url))
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(setup_sql))
    engine.dispose()
    return url


def write_results(name: str, results: list[dict[str, object]]) -> Path:
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{name}_{int(time.time())}.json"
    path.write_text(json.dumps(results, indent=2))
    return path
