"""Mirror: how fast each peer applies the same Kafka backlog to a PostgreSQL table.

The backlog is what the relay publishes: a fresh outbox (``common.fill_outbox``) drained
by `relay run --once` into one topic (6 partitions, outbox headers, keys over a tenth as
many customers as records). Each peer then applies all of it into a fresh database of
its own on the durable cluster, as a child process timed from start to exit: `relay
mirror --once`, the Spark job jobs/mirror.py at local[2], and a raw batched upsert
(bench/mirror_peers.py). Every run is checked: one row per customer, each with the
customer's last value.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .common import (
    WORKDIR,
    Outcome,
    Row,
    create_topic,
    delete_topics,
    distinct_keys,
    execute,
    fill_outbox,
    job,
    log,
    relay_cli,
    relay_env,
    run_id,
    run_measured,
    scratch_database,
)

FULL_RECORDS = 500_000
QUICK_RECORDS = 100_000

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


def make_backlog(admin_url: str, bootstrap: str, topic: str, records: int) -> dict[str, float]:
    """Publish ``records`` outbox events into ``topic`` with `relay run --once`."""
    rid = run_id()
    with scratch_database(admin_url, f"bench_mirror_src_{rid}") as url:
        fill_s = fill_outbox(url, "outbox", topic, records)
        measured = run_measured(
            relay_cli("run", "--once"), relay_env(url, bootstrap, f"bench-{rid}")
        )
    delete_topics(bootstrap, [f"bench-{rid}-positions"])
    return {"fill_s": round(fill_s, 2), "relay_s": round(measured.seconds, 2)}


def expected(records: int) -> tuple[int, int]:
    """(rows, sum of n) the mirrored table must hold: each customer's last n."""
    keys = min(distinct_keys(records), records)
    last = [k + keys * ((records - 1 - k) // keys) for k in range(keys)]
    return len(last), sum(last)


def apply_once(
    admin_url: str, bootstrap: str, kind: str, topic: str, records: int
) -> dict[str, object]:
    rid = run_id()
    mapping = WORKDIR / f"mirror-{rid}.toml"
    mapping.write_text(MAPPING.format(topic=topic))
    try:
        with scratch_database(admin_url, f"bench_mirror_{rid}", TABLE_DDL) as url:
            env = relay_env(
                url,
                bootstrap,
                f"bench-{rid}",
                RELAY_MIRROR_CONFIG=str(mapping),
                RELAY_MIRROR_GROUP=f"bench-{rid}",
                BENCH_DATABASE_URL=url,
                BENCH_BOOTSTRAP=bootstrap,
            )
            if kind == "relay_mirror_once":
                command = relay_cli("mirror", "--once")
            elif kind == "spark_local2":
                command = job("mirror.py", "--master", "local[2]")
            else:
                command = [sys.executable, "-m", "bench.mirror_peers", topic]
            measured = run_measured(command, env)
            rows, total = execute(url, "SELECT count(*), coalesce(sum(n), 0) FROM bench_customers")[
                0
            ]
    finally:
        Path(mapping).unlink(missing_ok=True)
    if (rows, total) != expected(records):
        raise RuntimeError(
            f"mirror {kind}: table holds {rows} rows (sum {total}), expected {expected(records)}"
        )
    log(
        f"mirror {kind}: {records} records in {measured.seconds:.1f} s "
        f"({records / measured.seconds:,.0f} records/s)"
    )
    return {
        "records": records,
        "seconds": round(measured.seconds, 2),
        "records_per_s": round(records / measured.seconds),
        "peak_rss_mib": round(measured.peak_rss_mib, 1),
        "table_rows": rows,
    }


def run(admin_url: str, bootstrap: str, quick: bool) -> Outcome:
    records = QUICK_RECORDS if quick else FULL_RECORDS
    topic = f"bench-mirror-{run_id()}"
    create_topic(bootstrap, topic)
    try:
        backlog = make_backlog(admin_url, bootstrap, topic, records)
        figures = {
            kind: apply_once(admin_url, bootstrap, kind, topic, records)
            for kind in ("relay_mirror_once", "raw_batched_upsert", "spark_local2")
        }
    finally:
        delete_topics(bootstrap, [topic])

    def rate(kind: str) -> float:
        value = figures[kind]["records_per_s"]
        assert isinstance(value, int | float)
        return float(value)

    ours = rate("relay_mirror_once")
    outcome = Outcome()
    outcome.rows.append(
        Row(
            f"mirror {records:,} records: relay mirror --once vs raw batched upsert",
            ours,
            rate("raw_batched_upsert"),
            "records/s",
        )
    )
    outcome.rows.append(
        Row(
            f"mirror {records:,} records: relay mirror --once vs Spark job local[2]",
            ours,
            rate("spark_local2"),
            "records/s",
        )
    )
    outcome.headline.update(
        mirror_vs_raw_upsert=round(ours / rate("raw_batched_upsert"), 3),
        mirror_vs_spark_local2=round(ours / rate("spark_local2"), 3),
        mirror_records=records,
    )
    outcome.raw["mirror"] = {
        "backlog": {**backlog, "records": records, "customers": distinct_keys(records)},
        **figures,
    }
    return outcome
