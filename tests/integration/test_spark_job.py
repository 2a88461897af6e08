"""The Spark job: relay partitions as Spark tasks, in local mode."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from relay.chaos.process_tree import is_stopped
from tests.integration import support
from tests.integration.support import (
    PROJECT_ROOT,
    RelayTestEnv,
    assert_exactly_once_in_order,
    read_committed,
    run_relay,
    wait_until,
)
from tests.integration.writes import write_events

JOB = PROJECT_ROOT / "jobs" / "outbox_relay.py"


def run_job(env: RelayTestEnv, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return support.run_job("outbox_relay.py", env.env(**extra_env), *args)


@pytest.mark.long(30)
def test_spark_job_publishes_four_relay_partitions_exactly_once(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    first_batch = write_events(relay_env.database_url, topic, 2000)
    # Spark may run each task twice (local[4,2]): the first attempt of one task fails
    # after its first Kafka commit, before the outbox clean-up, and Spark re-runs it.
    result = run_job(
        relay_env,
        "--master",
        "local[4,2]",
        "--batch-size",
        "200",
        RELAY_FAILPOINTS=f"after_commit=raise,partition=2,once={tmp_path / 'failed-once'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "failed-once").exists(), "the task failure was never injected"
    assert "FailpointError" in result.stderr  # Spark saw the task fail and re-ran it
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), first_batch)
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]

    # A scheduled rerun publishes only what was committed since.
    second_batch = write_events(relay_env.database_url, topic, 300) - first_batch
    again = run_job(relay_env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_exactly_once_in_order(
        read_committed(relay_env.bootstrap_servers, topic), first_batch | second_batch
    )


def test_spark_job_fails_fast_on_bad_configuration(relay_env: RelayTestEnv) -> None:
    result = run_job(
        relay_env, RELAY_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", RELAY_KAFKA_TIMEOUT_S="3"
    )
    assert result.returncode == 4
    assert "no Kafka broker answered at 127.0.0.1:1" in result.stderr


def test_spark_task_paused_mid_transaction_is_fenced_then_rerun_by_spark(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """A Spark task stops inside its Kafka transaction; another relay takes the partition
    over; the resumed task is fenced, fails with a clear error, and Spark's second
    attempt finds nothing left to publish. Nothing is published twice."""
    committed = write_events(relay_env.database_url, topic, 800)
    marker = tmp_path / "paused"
    job = subprocess.Popen(
        [sys.executable, str(JOB), "--master", "local[4,2]", "--batch-size", "100"],
        env=relay_env.env(RELAY_FAILPOINTS=f"before_commit=stop,partition=0,once={marker}"),
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: (
                marker.exists() and marker.read_text() != "" and is_stopped(int(marker.read_text()))
            ),
            120,
            "the Spark task to pause inside its transaction",
        )
        takeover = run_relay(relay_env, "run", "--once", "--partitions", "0")
        assert takeover.returncode == 0, takeover.stderr
        os.kill(int(marker.read_text()), signal.SIGCONT)
        _, stderr = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr[-3000:]
    fenced = "another relay instance initialised this partition's transactional id"
    assert fenced in stderr, stderr[-4000:]
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)
