"""The demos (scripts/demo: examples/orders_demo.py, examples/replicate_demo.py) leave
nothing behind: the database, topics and groups they made are gone when they end, also
when interrupted (Ctrl-C), unless --keep asks to keep them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from confluent_kafka.admin import AdminClient

from relay.devenv.endpoints import Endpoints
from tests.integration.support import PROJECT_ROOT, run_sql, wait_until

_ORDERS = PROJECT_ROOT / "examples" / "orders_demo.py"
_REPLICATE = PROJECT_ROOT / "examples" / "replicate_demo.py"


def _env(endpoints: Endpoints, target: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        PYTHONUNBUFFERED="1",
        RELAY_DATABASE_URL=endpoints.admin_database_url,
        RELAY_KAFKA_BOOTSTRAP_SERVERS=endpoints.bootstrap_servers,
        RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS=endpoints.bootstrap_servers,
        RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS=target,
    )
    env.update(extra)
    return env


def _run(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _databases(endpoints: Endpoints, run_id: str) -> list[object]:
    rows = run_sql(
        endpoints.admin_database_url,
        "SELECT datname FROM pg_database WHERE datname = :name",
        name=f"relay_demo_{run_id}",
    )
    return [row[0] for row in rows]


def _topics(bootstrap: str, run_id: str) -> set[str]:
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    return {t for t in listed if t.endswith(f".{run_id}")}


def _groups(bootstrap: str, run_id: str) -> set[str]:
    # The client must outlive its future: a future whose client is gone never resolves
    # (confluent-kafka-python #1242).
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_consumer_groups().result(30)
    return {g.group_id for g in found.valid if g.group_id.startswith(f"demo-{run_id}-")}


@pytest.mark.long(30)
def test_the_demos_clean_up_after_themselves(
    endpoints: Endpoints, target_bootstrap_servers: str
) -> None:
    env = _env(endpoints, target_bootstrap_servers)
    orders = _run(_ORDERS, env)
    assert orders.returncode == 0, orders.stdout + orders.stderr
    assert "exactly once" in orders.stdout and "equals orders" in orders.stdout
    run_id = re.findall(r"demo\.orders\.([0-9a-f]{8})", orders.stdout)[0]
    assert f"cleaned up: database relay_demo_{run_id}" in orders.stdout
    assert _databases(endpoints, run_id) == []
    assert _topics(endpoints.bootstrap_servers, run_id) == set()
    assert _groups(endpoints.bootstrap_servers, run_id) == set()

    replicate = _run(_REPLICATE, env)
    assert replicate.returncode == 0, replicate.stdout + replicate.stderr
    run_id = re.findall(r"demo\.payments\.([0-9a-f]{8})", replicate.stdout)[0]
    assert "cleaned up: topics" in replicate.stdout
    assert _topics(endpoints.bootstrap_servers, run_id) == set()
    assert _topics(target_bootstrap_servers, run_id) == set()
    assert _groups(target_bootstrap_servers, run_id) == set()


@pytest.mark.long(30)
def test_an_interrupted_demo_cleans_up_and_keep_keeps(
    endpoints: Endpoints, target_bootstrap_servers: str, tmp_path: Path
) -> None:
    # A busy machine may let a run finish before the Ctrl-C lands: a few tries, each one
    # checked to have cleaned up all the same.
    for attempt in range(3):
        out = tmp_path / f"demo-{attempt}.out"
        with out.open("w") as handle:
            demo = subprocess.Popen(
                [sys.executable, str(_ORDERS)],
                env=_env(endpoints, target_bootstrap_servers),
                cwd=PROJECT_ROOT,
                stdout=handle,
                stderr=subprocess.STDOUT,
                text=True,
            )
        try:
            wait_until(lambda o=out: "1. migrations" in o.read_text(), 60, "the demo to start")
            demo.send_signal(signal.SIGINT)  # Ctrl-C
            demo.wait(120)
        finally:
            if demo.poll() is None:
                demo.kill()
        text = out.read_text()
        if "KeyboardInterrupt" in text:
            break
        assert "cleaned up: database" in text, text
    assert "KeyboardInterrupt" in text
    (run_id,) = set(re.findall(r"relay_demo_([0-9a-f]{8})", text))
    assert _databases(endpoints, run_id) == []
    assert _topics(endpoints.bootstrap_servers, run_id) == set()

    kept = _run(_ORDERS, _env(endpoints, target_bootstrap_servers), "--keep")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    run_id = re.findall(r"demo\.orders\.([0-9a-f]{8})", kept.stdout)[0]
    assert f"kept: database relay_demo_{run_id}" in kept.stdout
    try:
        assert _databases(endpoints, run_id) == [f"relay_demo_{run_id}"]
        assert _topics(endpoints.bootstrap_servers, run_id) == {f"demo.orders.{run_id}"}
    finally:
        engine = sa.create_engine(endpoints.admin_database_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "relay_demo_{run_id}" WITH (FORCE)'))
        engine.dispose()
        admin = AdminClient({"bootstrap.servers": endpoints.bootstrap_servers})
        for future in admin.delete_topics([f"demo.orders.{run_id}"]).values():
            future.result(30)
