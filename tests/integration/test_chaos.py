"""The chaos harness (docs/chaos.md): the standalone checker against the shared test
servers (with a replica on the second dev cluster), and the short chaos run: one fault of
each kind (the plan takes every kind once before it draws any twice) while service
writers run, then the checker. The chaos run uses a PostgreSQL and two
Kafka clusters of its own on free ports (it kills and restarts them), never the shared
test servers."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from relay.chaos.names import HISTORY, MIRROR
from relay.chaos.preparation import write_mapping
from relay.chaos.workload import Workload, WorkloadConfig, create_schema
from relay.runtime.clock import SystemClock
from tests.integration.replicate_support import ReplicaEnv, new_group, read_log
from tests.integration.support import (
    PROJECT_ROOT,
    RelayTestEnv,
    read_committed,
    relay_command,
    run_relay,
    wait_until,
)

# For the faults: a quiet machine needs about 100 s, one busy with the suite's other workers
# up to ~300 s; the rest is room for a fault skipped once (e.g. a Spark job slow to start a
# task) to be tried again at the end of the plan, as the injector does.
DURATION_LIMIT_S = 480
SHORT_RUN_LIMIT_S = 720  # the whole run: faults, drain and check
FAULT_KINDS = {
    "kill9_relay",
    "kill9_mirror",
    "kill9_spark",
    "kill9_broker",
    "restart_postgres",
    "pause_relay",
    "pause_mirror",
    "kill9_replicator",
    "pause_replicator",
    "kill9_target_broker",
}
REPLICA_COUNTS = (
    "replica_lost=0 replica_duplicated=0 replica_out_of_order=0 replica_extra=0 replica_corrupted=0"
)


def test_checker_passes_a_clean_run_and_counts_injected_anomalies(
    relay_env: RelayTestEnv,
    make_topic: Callable[..., str],
    target_bootstrap_servers: str,
    target_kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    topic = make_topic("chaos", partitions=3)
    try:
        _check_a_clean_run_then_injected_anomalies(
            relay_env, topic, target_bootstrap_servers, tmp_path
        )
    finally:
        target_kafka_admin.delete_topics([f"dr.{topic}"], operation_timeout=30)


def _check_a_clean_run_then_injected_anomalies(
    relay_env: RelayTestEnv, topic: str, target: str, tmp_path: Path
) -> None:
    engine = create_engine(relay_env.database_url, poolclass=NullPool)
    try:
        create_schema(engine, keys=10)
        config = WorkloadConfig(writers=2, keys=10, long_ratio=0.0)
        workload = Workload(engine, topic, config, seed=3, clock=SystemClock())
        workload.start()
        try:
            wait_until(
                lambda: workload.stats.acknowledged > 0 and workload.stats.rolled_back > 0,
                60,
                "the writers to commit and roll back transactions",
            )
        finally:
            workload.stop()
    finally:
        engine.dispose()
    assert workload.stats.acknowledged > 0 and workload.stats.rolled_back > 0
    assert run_relay(relay_env, "run", "--once").returncode == 0
    mapping = tmp_path / "mirror.toml"
    write_mapping(mapping, topic)
    mirror = {"RELAY_MIRROR_CONFIG": str(mapping), "RELAY_MIRROR_GROUP": "chaos-check"}
    applied = run_relay(relay_env, "mirror", "--once", **mirror)
    assert applied.returncode == 0, applied.stderr
    replica = ReplicaEnv(relay_env.bootstrap_servers, target, new_group())
    copied = replica.run("--once", "--topics", topic, "--target-prefix", "dr.")
    assert copied.returncode == 0, copied.stderr

    def check() -> subprocess.CompletedProcess[str]:
        return run_relay(
            relay_env,
            "chaos",
            "check",
            "--topic",
            topic,
            "--mirror-table",
            MIRROR,
            "--history-table",
            HISTORY,
            "--replica-bootstrap-servers",
            target,
            "--replica-topic",
            f"dr.{topic}",
            "--replica-source-alias",
            "east",
        )

    clean = check()
    assert clean.returncode == 0, clean.stderr
    ledger = relay_env.sql("SELECT count(*) FROM chaos_ledger")[0][0]
    assert clean.stdout.strip().splitlines()[-1] == (
        f"checked {ledger} events (ledger {ledger}): lost=0 duplicated=0 out_of_order=0 "
        f"aborted_visible=0 corrupted=0 mirror_mismatch=0 history_mismatch=0 {REPLICA_COUNTS} OK"
    )
    versions = relay_env.sql(f"SELECT count(*), count(*) FILTER (WHERE is_current) FROM {HISTORY}")
    keys = relay_env.sql("SELECT count(DISTINCT key) FROM chaos_ledger")[0][0]
    assert versions[0] == (ledger, keys)  # every committed version once, one current per key

    # A published event again (not through the relay, so not replicated either), a
    # mirrored row changed behind the mirror's back, and a copy written to the replica
    # again: the checker must see all three.
    first = read_committed(relay_env.bootstrap_servers, topic)[0]
    producer = Producer({"bootstrap.servers": relay_env.bootstrap_servers})
    producer.produce(topic, value=first.value, key=first.key, partition=first.partition)
    assert producer.flush(30) == 0
    relay_env.sql(
        f"UPDATE {MIRROR} SET balance = balance + 1 WHERE key = (SELECT min(key) FROM {MIRROR})"
    )
    relay_env.sql(  # an older version lost from the history: the last one alone is not enough
        f"DELETE FROM {HISTORY} WHERE (key, seq) = "
        f"(SELECT key, min(seq) FROM {HISTORY} WHERE NOT is_current GROUP BY key LIMIT 1)"
    )
    copy = read_log(target, f"dr.{topic}", 3)[0][0]
    producer = Producer({"bootstrap.servers": target})
    producer.produce(
        f"dr.{topic}",
        value=copy.value,
        key=copy.key,
        partition=copy.partition,
        headers=list(copy.headers),
        timestamp=copy.timestamp,
    )
    assert producer.flush(30) == 0
    broken = check()
    assert broken.returncode == 1, broken.stderr
    summary = broken.stdout.strip().splitlines()[-1]
    assert "lost=0 duplicated=1 out_of_order=0" in summary
    assert summary.endswith(
        "mirror_mismatch=1 history_mismatch=1 replica_lost=1 replica_duplicated=1 "
        "replica_out_of_order=0 "
        "replica_extra=0 replica_corrupted=0 FAILED"
    )
    assert "  duplicated: partition" in broken.stdout
    assert "  history_mismatch: key acct-" in broken.stdout
    assert "  replica_duplicated: target partition 0" in broken.stdout
    assert "  replica_lost: source partition" in broken.stdout


def run_chaos(argv: list[str], limit_s: float) -> subprocess.CompletedProcess[str]:
    """`relay chaos ...` as a child process, stopped (SIGTERM: it stops its processes and
    servers, then exits) when it outlasts ``limit_s``."""
    with subprocess.Popen(
        argv, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as chaos:
        try:
            stdout, stderr = chaos.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            chaos.terminate()
            stdout, stderr = chaos.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, chaos.returncode, stdout, stderr)


def run_chaos_of(
    kinds: tuple[str, ...], workdir: Path, *, duration_limit_s: float, limit_s: float
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    """A focused `relay chaos` run: one fault of each of ``kinds`` (seed 7) in
    ``workdir``; the run, its JSON report and its output (stdout, stderr's end) for an
    assertion's message. The run must exit 0."""
    report_path = workdir / "report.json"
    argv = relay_command(
        "chaos", "--faults", str(len(kinds)), "--seed", "7", "--kinds", ",".join(kinds),
        "--duration-limit", str(duration_limit_s), "--workdir", str(workdir / "chaos"),
        "--report", str(report_path),
    )  # fmt: skip
    run = run_chaos(argv, limit_s)
    output = run.stdout + run.stderr[-5000:]
    assert run.returncode == 0, output
    report: dict[str, Any] = json.loads(report_path.read_text())
    return run, report, output


@pytest.mark.long(200)
@pytest.mark.timeout(SHORT_RUN_LIMIT_S + 120)
def test_short_chaos_run_loses_duplicates_and_reorders_nothing(tmp_path: Path) -> None:
    """With `relay run`'s default, one Kafka transaction per process (the Spark job of the
    run is the mirror's: the relay's is refused beside such relays)."""
    report_path = tmp_path / "report.json"
    started = time.monotonic()
    argv = relay_command(
        "chaos",
        "--faults",
        str(len(FAULT_KINDS)),
        "--seed",
        "7",
        "--duration-limit",
        str(DURATION_LIMIT_S),
        # The replicator's operator faults (10-40 s each) run in a focused test of their
        # own (test_chaos_replica_operations.py), not in this short run's time.
        "--kinds",
        ",".join(sorted(FAULT_KINDS)),
        "--workdir",
        str(tmp_path / "chaos"),
        "--report",
        str(report_path),
    )
    run = run_chaos(argv, SHORT_RUN_LIMIT_S)
    elapsed = time.monotonic() - started
    output = run.stdout + run.stderr[-5000:]
    assert run.returncode == 0, output
    summary = run.stdout.strip().splitlines()[-1]
    assert summary.startswith("checked ") and summary.endswith(" OK"), output
    assert (
        "lost=0 duplicated=0 out_of_order=0 aborted_visible=0 corrupted=0 mirror_mismatch=0 "
        f"history_mismatch=0 {REPLICA_COUNTS} OK" in summary
    )

    report = json.loads(report_path.read_text())
    assert report["ok"] is True
    assert report["faults_injected"] == dict.fromkeys(FAULT_KINDS, 1), report["faults"]
    assert report["mirror_checked"] is True
    assert report["history_checked"] is True  # every version of every key, after the kills
    assert report["ledger"] > 500 and report["events"] == report["ledger"]
    assert all(v == 0 for v in report["anomalies"].values())
    assert len(report["anomalies"]) == 12, report["anomalies"]  # the replica's 5 included
    # the replica on the second cluster: every committed source record, once, in order
    assert report["replica_checked"] is True
    assert report["replica"]["source_records"] == report["events"]
    assert report["replica"]["copies"] == report["events"]
    assert report["replica"]["topic"] == "dr.chaos-accounts"
    # the replicator was killed, and restarted by the supervisor
    assert report["processes"]["replicator"]["exits"].get("SIGKILL", 0) >= 1
    assert report["processes"]["replicator"]["starts"] >= 2
    # one JSON line per fault, with an ISO timestamp
    logged = [json.loads(line) for line in (tmp_path / "chaos" / "faults.jsonl").open()]
    assert sum(1 for entry in logged if entry["injected"]) == len(FAULT_KINDS)
    assert all("T" in entry["at"] and entry["kind"] for entry in logged)
    assert elapsed < SHORT_RUN_LIMIT_S, f"the short chaos run took {elapsed:.0f} s"


# The faults whose course depends on how `relay run` commits (the replicator's do not).
PARTITION_TRANSACTION_KINDS = {"kill9_relay", "pause_relay", "kill9_spark", "kill9_broker"}


@pytest.mark.long(100)
@pytest.mark.timeout(SHORT_RUN_LIMIT_S + 120)
def test_short_chaos_run_with_one_transaction_per_relay_partition(tmp_path: Path) -> None:
    """`relay run --partition-transactions`, and the Spark relay job beside it, which
    fences such relays: the relay's faults, without the second cluster."""
    report_path = tmp_path / "report.json"
    argv = relay_command(
        "chaos",
        "--partition-transactions",
        "--faults",
        str(len(PARTITION_TRANSACTION_KINDS)),
        "--seed",
        "7",
        "--duration-limit",
        str(DURATION_LIMIT_S),
        "--kinds",
        ",".join(sorted(PARTITION_TRANSACTION_KINDS)),
        "--replicate",
        "off",
        "--workdir",
        str(tmp_path / "chaos"),
        "--report",
        str(report_path),
    )
    run = run_chaos(argv, SHORT_RUN_LIMIT_S)
    output = run.stdout + run.stderr[-5000:]
    assert run.returncode == 0, output
    summary = run.stdout.strip().splitlines()[-1]
    assert summary.endswith(
        "lost=0 duplicated=0 out_of_order=0 aborted_visible=0 corrupted=0 mirror_mismatch=0 "
        "history_mismatch=0 OK"
    ), output
    report = json.loads(report_path.read_text())
    assert report["faults_injected"] == dict.fromkeys(PARTITION_TRANSACTION_KINDS, 1)
    spark = report["processes"]["spark"]  # the relay's Spark job, beside the relays
    assert spark["starts"] > spark["exits"].get("exit 2", 0), report["processes"]
