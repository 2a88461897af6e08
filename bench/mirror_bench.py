"""Throughput of applying a Kafka backlog: `relay mirror --once` vs the Spark job.

    .venv/bin/python -m bench.mirror_bench [--records 100000] [--partitions 6]

One topic holds the backlog (transactions of 1000 records over 1000 keys, with the
headers the outbox relay sets); each run applies all of it into a fresh database of its
own (same mapped table, empty), against the servers of `relay dev up` (or
RELAY_DATABASE_URL / RELAY_KAFKA_BOOTSTRAP_SERVERS). Wall time includes process start-up,
as an operator sees it. Results are also written to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.common import ROOT, endpoints, fresh_database, write_results

TABLE_DDL = """
CREATE TABLE bench_customers (
    customer text PRIMARY KEY, n bigint NOT NULL, pad text NOT NULL, source_seq bigint NOT NULL)
"""
MAPPING = """
[[tables]]
table = "bench_customers"
topics = ["{topic}"]
key = {{ column = "customer" }}
version = {{ column = "source_seq", source = "header:outbox-seq" }}
columns = {{ n = "n", pad = "pad" }}
"""


def fill_topic(bootstrap: str, topic: str, records: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex}",
            "partitioner": "murmur2_random",
            "linger.ms": 20,
        }
    )
    producer.init_transactions(30)
    started = time.monotonic()
    for start in range(0, records, 1000):
        producer.begin_transaction()
        for n in range(start, min(records, start + 1000)):
            value = json.dumps({"n": n, "pad": "x" * 100}).encode()
            headers: list[tuple[str, str | bytes | None]] = [
                ("outbox-seq", str(n + 1).encode()),
                ("event-type", b"CustomerChanged"),
            ]
            while True:
                try:
                    producer.produce(topic, value, f"customer-{n % 1000}", headers=headers)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.commit_transaction(60)
    return time.monotonic() - started


def run(kind: str, admin_url: str, bootstrap: str, topic: str, records: int) -> dict[str, object]:
    run_id = uuid.uuid4().hex[:8]
    url = fresh_database(admin_url, f"bench_mirror_{kind}_{run_id}", TABLE_DDL)
    with tempfile.TemporaryDirectory() as scratch:
        mapping = Path(scratch) / "mirror.toml"
        mapping.write_text(MAPPING.format(topic=topic))
        env = {
            **os.environ,
            "RELAY_DATABASE_URL": url,
            "RELAY_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "RELAY_MIRROR_CONFIG": str(mapping),
            "RELAY_MIRROR_GROUP": f"bench-{run_id}",
        }
        if kind == "process":
            command = [sys.executable, "-m", "relay.cli", "--log-level", "WARNING"]
            command += ["mirror", "--once"]
        else:
            command = [sys.executable, str(ROOT / "jobs" / "mirror.py"), "--log-level", "WARNING"]
        started = time.monotonic()
        subprocess.run(command, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        elapsed = time.monotonic() - started
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT count(*), max(n) FROM bench_customers")).one()
        dead = conn.execute(sa.text("SELECT count(*) FROM mirror_dead_letters")).scalar_one()
    engine.dispose()
    return {
        "kind": kind,
        "records": records,
        "apply_s": round(elapsed, 2),
        "records_per_s": round(records / elapsed),
        "rows": rows[0],
        "max_n": rows[1],
        "dead_letters": dead,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    admin_url, bootstrap = endpoints()
    topic = f"bench-mirror-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=args.partitions, replication_factor=1)
    admin.create_topics([new])[topic].result(30)
    fill_s = fill_topic(bootstrap, topic, args.records)
    print(
        f"backlog: {args.records} records in {topic} ({args.partitions} partitions), "
        f"produced in {fill_s:.1f} s"
    )
    results = [
        run(kind, admin_url, bootstrap, topic, args.records) for kind in ("process", "spark")
    ]
    for r in results:
        print(json.dumps(r))
    ratio = results[0]["records_per_s"] / results[1]["records_per_s"]  # type: ignore[operator]
    print(f"relay mirror --once is {ratio:.2f}x the Spark job's records/s on this backlog")
    write_results("mirror_bench", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
