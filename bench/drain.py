"""Drain: how fast each peer empties the same outbox backlog into Kafka.

Each peer gets a fresh migrated database on the durable cluster (8 relay partitions),
a fresh topic (6 partitions) and the same backlog (``common.fill_outbox``), and runs as a
child process; its time is the process's wall time, start-up included, as an operator
sees it. Peers: `relay run --once` (one process, and two with half the partitions each,
bench/split_run.py), the Spark job jobs/outbox_relay.py at local[1] and
local[2], a raw transactional producer and a naive at-least-once relay
(bench/forward_peers.py). Every run is checked: the topic holds exactly the backlog for
a read_committed consumer. Also measured: the peak RSS of `relay run --once` on the big
backlog over its peak on a backlog ten times smaller (does memory grow with the backlog?).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from .common import (
    RELAY_PARTITIONS,
    Measured,
    Outcome,
    Row,
    count_records,
    create_topic,
    delete_topics,
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

FULL_ROWS = 1_000_000
QUICK_ROWS = 100_000

Command = Callable[[str, str, str], tuple[list[str], dict[str, str]]]


def _relay(*args: str) -> Command:
    def command(url: str, bootstrap: str, prefix: str) -> tuple[list[str], dict[str, str]]:
        return relay_cli(*args), relay_env(url, bootstrap, prefix)

    return command


def _job(master: str) -> Command:
    def command(url: str, bootstrap: str, prefix: str) -> tuple[list[str], dict[str, str]]:
        return job("outbox_relay.py", "--master", master), relay_env(url, bootstrap, prefix)

    return command


def _split(processes: int) -> Command:
    def command(url: str, bootstrap: str, prefix: str) -> tuple[list[str], dict[str, str]]:
        split = [sys.executable, "-m", "bench.split_run", str(processes), str(RELAY_PARTITIONS)]
        return split, relay_env(url, bootstrap, prefix)

    return command


def _peer(kind: str) -> Command:
    def command(url: str, bootstrap: str, prefix: str) -> tuple[list[str], dict[str, str]]:
        env = relay_env(url, bootstrap, prefix, BENCH_DATABASE_URL=url, BENCH_BOOTSTRAP=bootstrap)
        return [sys.executable, "-m", "bench.forward_peers", kind], env

    return command


PEERS: dict[str, Command] = {
    "relay_run_once": _relay("run", "--once"),
    "relay_run_once_x2": _split(2),
    "spark_local1": _job("local[1]"),
    "spark_local2": _job("local[2]"),
    "raw_txn_producer": _peer("raw"),
    "naive_skip_locked": _peer("naive"),
}


def drain_once(admin_url: str, bootstrap: str, kind: str, rows: int) -> dict[str, object]:
    """Fill a fresh outbox with ``rows`` events and drain it with peer ``kind``."""
    rid = run_id()
    topic = f"bench-drain-{kind.replace('_', '-')}-{rid}"
    create_topic(bootstrap, topic)
    try:
        with scratch_database(admin_url, f"bench_drain_{rid}") as url:
            fill_s = fill_outbox(url, "outbox", topic, rows)
            command, env = PEERS[kind](url, bootstrap, f"bench-{rid}")
            measured: Measured = run_measured(command, env)
            left = execute(url, "SELECT count(*) FROM outbox")[0][0]
        in_topic = count_records(bootstrap, topic)
    finally:
        delete_topics(bootstrap, [topic, f"bench-{rid}-positions"])
    if in_topic != rows:
        raise RuntimeError(f"{kind}: {in_topic} records in {topic}, expected {rows}")
    result: dict[str, object] = {
        "rows": rows,
        "fill_s": round(fill_s, 2),
        "seconds": round(measured.seconds, 2),
        "rows_per_s": round(rows / measured.seconds),
        "peak_rss_mib": round(measured.peak_rss_mib, 1),
        "left_in_outbox": left,
        "records_in_topic": in_topic,
    }
    log(
        f"drain {kind}: {rows} rows in {measured.seconds:.1f} s "
        f"({rows / measured.seconds:,.0f} rows/s)"
    )
    return result


QUICK_SKIPS = frozenset({"spark_local1"})
"""Left out of --quick (a smoke run): the Spark job runs there at local[2] only."""


def run(admin_url: str, bootstrap: str, quick: bool) -> Outcome:
    rows = QUICK_ROWS if quick else FULL_ROWS
    kinds = [kind for kind in PEERS if not (quick and kind in QUICK_SKIPS)]
    figures = {kind: drain_once(admin_url, bootstrap, kind, rows) for kind in kinds}
    small = drain_once(admin_url, bootstrap, "relay_run_once", rows // 10)

    def rate(kind: str) -> float:
        value = figures[kind]["rows_per_s"]
        assert isinstance(value, int | float)
        return float(value)

    ours = rate("relay_run_once")
    outcome = Outcome()
    outcome.rows.append(
        Row(
            f"drain {rows:,} rows: relay run --once, 2 processes vs naive SKIP LOCKED relay",
            rate("relay_run_once_x2"),
            rate("naive_skip_locked"),
            "rows/s",
        )
    )
    for kind, label in (
        ("raw_txn_producer", "raw transactional producer"),
        ("naive_skip_locked", "naive SKIP LOCKED relay"),
        ("spark_local1", "Spark job local[1]"),
        ("spark_local2", "Spark job local[2]"),
    ):
        if kind not in figures:
            continue
        outcome.rows.append(
            Row(f"drain {rows:,} rows: relay run --once vs {label}", ours, rate(kind), "rows/s")
        )
    big_rss = figures["relay_run_once"]["peak_rss_mib"]
    small_rss = small["peak_rss_mib"]
    assert isinstance(big_rss, float) and isinstance(small_rss, float)
    outcome.rows.append(
        Row(
            f"peak RSS relay run --once: {rows:,} vs {rows // 10:,} rows", big_rss, small_rss, "MiB"
        )
    )
    outcome.headline.update(
        drain_vs_raw_txn=round(ours / rate("raw_txn_producer"), 3),
        drain_vs_naive=round(ours / rate("naive_skip_locked"), 3),
        drain_2_processes_vs_naive=round(rate("relay_run_once_x2") / rate("naive_skip_locked"), 3),
        **{
            f"drain_vs_{kind}": round(ours / rate(kind), 3)
            for kind in ("spark_local1", "spark_local2")
            if kind in figures
        },
        drain_rows=rows,
        rss_growth=round(big_rss / small_rss, 3),
        rss_growth_rows=[rows, rows // 10],
    )
    outcome.raw["drain"] = {**figures, "relay_run_once_small": small}
    return outcome
