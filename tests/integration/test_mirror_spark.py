"""jobs/mirror.py: Kafka partitions as Spark tasks (local mode), with the same
guarantees as `relay mirror`: a task that fails after committing a batch is re-run by
Spark and continues from the stored offset; a scheduled rerun applies only what is new."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration import support
from tests.integration.mirror_support import (
    MirrorEnv,
    TxProducer,
    audit_count,
    audit_duplicates,
    expected_items,
    items_mapping,
    items_state,
    last_stable_offsets,
    mirror_env,
    records_of,
)


def run_job(env: MirrorEnv, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return support.run_job("mirror.py", env.env(**extra_env), *args)


@pytest.mark.long(45)
def test_spark_job_applies_each_record_exactly_once_and_reruns_apply_only_new_ones(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("mirror-spark", partitions=3)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    producer = TxProducer(bootstrap_servers)
    produced = [(n % 150, {"name": f"n{n}", "qty": n}) for n in range(1500)]
    producer.in_transactions(topic, records_of(produced))

    # The first attempt of partition 1's task fails after its first committed batch;
    # Spark (local[3,2]: two attempts per task) runs it again.
    first = run_job(
        env,
        "--master",
        "local[3,2]",
        "--batch-size",
        "100",
        RELAY_FAILPOINTS=f"mirror_after_commit=raise,partition=1,once={tmp_path / 'failed'}",
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert (tmp_path / "failed").exists(), "the task failure was never injected"
    assert "FailpointError" in first.stderr  # Spark saw the task fail and re-ran it
    assert audit_duplicates(env) == []
    assert audit_count(env) == len(produced)
    assert env.offsets() == last_stable_offsets(bootstrap_servers, topic)

    # A scheduled rerun applies only what was committed since.
    more = [(n % 150, {"name": f"m{n}", "qty": n}) for n in range(1500, 1800)]
    producer.in_transactions(topic, records_of(more))
    second = run_job(env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "mirrored 300 records" in second.stderr
    assert audit_duplicates(env) == []
    assert audit_count(env) == len(produced) + len(more)
    assert items_state(env) == expected_items(produced + more)
    assert env.offsets() == last_stable_offsets(bootstrap_servers, topic)

    # Nothing new: nothing to do, and no Spark session is even started.
    third = run_job(env)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "nothing to mirror" in third.stderr
    assert audit_count(env) == len(produced) + len(more)
