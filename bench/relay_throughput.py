"""Throughput of draining an outbox backlog: `relay run --once` vs the Spark job.

    .venv/bin/python -m bench.relay_throughput [--rows 100000] [--partitions 8]

Both runs drain the same backlog (same rows, same relay partitions, one fresh database
and topic each) side by side in one invocation, against the servers of `relay dev up`
(or RELAY_DATABASE_URL / RELAY_KAFKA_BOOTSTRAP_SERVERS). Wall time includes process
start-up, as an operator sees it. Results are also written to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid

import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import relay
from bench.common import ROOT, endpoints, fresh_database, write_results


def fill(url: str, topic: str, rows: int) -> float:
    engine = sa.create_engine(url)
    started = time.monotonic()
    for start in range(0, rows, 5000):
        with engine.begin() as conn:
            relay.publish_many(
                conn,
                [
                    relay.Event(topic, f"customer-{n % 1000}", {"n": n, "pad": "x" * 100})
                    for n in range(start, min(rows, start + 5000))
                ],
            )
    engine.dispose()
    return time.monotonic() - started


def count_committed(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
        }
    )
    total = 0
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += high - low
    consumer.close()
    return total  # includes one commit marker per transaction and partition


def run(kind: str, admin_url: str, bootstrap: str, rows: int, partitions: int) -> dict[str, object]:
    run_id = uuid.uuid4().hex[:8]
    topic = f"bench-{kind}-{run_id}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])[topic].result(30)
    url = fresh_database(
        admin_url,
        f"bench_{kind}_{run_id}",
        f"UPDATE outbox_settings SET partitions = {int(partitions)}",
    )
    fill_s = fill(url, topic, rows)
    env = {
        **os.environ,
        "RELAY_DATABASE_URL": url,
        "RELAY_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "RELAY_TRANSACTIONAL_ID_PREFIX": f"bench-{run_id}",
        "RELAY_POSITIONS_GROUP": f"bench-{run_id}",
    }
    if kind == "process":
        command = [sys.executable, "-m", "relay.cli", "--log-level", "WARNING", "run", "--once"]
    else:
        command = [sys.executable, str(ROOT / "jobs" / "outbox_relay.py"), "--log-level", "WARNING"]
    started = time.monotonic()
    subprocess.run(command, env=env, cwd=ROOT, check=True)
    elapsed = time.monotonic() - started
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        left = conn.execute(sa.text("SELECT count(*) FROM outbox")).scalar_one()
    engine.dispose()
    return {
        "kind": kind,
        "rows": rows,
        "relay_partitions": partitions,
        "fill_s": round(fill_s, 2),
        "drain_s": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed),
        "left_in_outbox": left,
        "kafka_log_entries": count_committed(bootstrap, topic, 6),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    admin_url, bootstrap = endpoints()
    results = []
    for kind in ("process", "spark"):
        results.append(run(kind, admin_url, bootstrap, args.rows, args.partitions))
        print(json.dumps(results[-1]), flush=True)
    ratio = results[0]["rows_per_s"] / results[1]["rows_per_s"]  # type: ignore[operator]
    print(f"relay run --once is {ratio:.2f}x the Spark job's rows/s on this backlog")
    write_results("relay_throughput", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
