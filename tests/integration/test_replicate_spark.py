"""jobs/replicate.py between the two real dev clusters: source partitions as Spark tasks
(local mode), with the same guarantees as `relay replicate --once`: committed records
only, once each, in order and as they were (I7, I8, docs/invariants.md), also when Spark
re-runs a task that failed halfway or a whole run is repeated."""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from relay.replication.startup import READY
from relay.runtime.failpoints import ENV_VAR as FAILPOINTS
from tests.integration import support
from tests.integration.replicate_support import (
    ReplicaEnv,
    assert_replica,
    new_group,
    read_log,
    write_transactions,
)

pytestmark = pytest.mark.integration

# write_transactions stamps records in 2023: without this, the brokers' time retention
# (168 h) deletes them at its next check, on the source and on the target (which copies
# the source topic's retention.ms).
KEEP = {"retention.ms": "-1"}


@pytest.fixture
def target_topics(target_kafka_admin: AdminClient) -> Iterator[list[str]]:
    """Target topics the job creates, deleted after the test (best effort)."""
    created: list[str] = []
    yield created
    if created:
        for future in target_kafka_admin.delete_topics(created, operation_timeout=30).values():
            with contextlib.suppress(KafkaException):
                future.result(timeout=30)


def run_job(replica: ReplicaEnv, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return support.run_job("replicate.py", replica.env(**extra_env), *args)


@pytest.mark.long(55)
def test_spark_job_copies_exactly_the_committed_records_and_a_rerun_copies_none(
    replica: ReplicaEnv, make_topic: Callable[..., str], target_topics: list[str]
) -> None:
    """A run copies the committed records; a rerun copies none; a run for another source
    into the same target topics is refused."""
    topic = make_topic("repl-spark", partitions=3, config=KEEP)
    target_topics.append(f"sp.{topic}")
    write_transactions(replica.source, topic, transactions=12, per_transaction=25)
    args = ("--topics", topic, "--target-prefix", "sp.", "--batch-size", "40")

    first = run_job(replica, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    source = read_log(replica.source, topic, 3)
    target = read_log(replica.target, f"sp.{topic}", 3)
    assert sum(map(len, source.values())) == 9 * 25  # 3 of the 12 transactions aborted
    assert all(source.values()), "a source partition without records: a task with no work"
    assert_replica(source, target)
    assert f"copied {9 * 25} records from 3 source partitions" in first.stderr
    for p, copies in target.items():
        for copy in copies:
            headers = dict(copy.headers)
            assert headers["relay-source-cluster"] == b"east"
            assert headers["relay-source-topic"] == topic.encode()
            assert headers["relay-source-partition"] == str(p).encode()

    # A scheduled rerun with nothing new: each task finds its position at the end.
    again = run_job(replica, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "copied 0 records from 3 source partitions" in again.stderr
    assert read_log(replica.target, f"sp.{topic}", 3) == target

    # The same target topics for another source: each task refuses the positions there;
    # the driver fails with one line, and nothing is copied.
    other = run_job(replica, *args, "--source-alias", "west")
    assert other.returncode == 1, other.stderr[-3000:]
    errors = [line for line in other.stderr.splitlines() if line.startswith("replicate: error:")]
    assert len(errors) == 1, other.stderr[-3000:]
    assert errors[0].startswith("replicate: error: a task failed: "), errors
    assert "was committed for source 'east'" in errors[0], errors
    assert read_log(replica.target, f"sp.{topic}", 3) == target


@pytest.mark.long(25)
@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_a_task_failing_mid_partition_is_rerun_by_spark_and_duplicates_nothing(
    replica: ReplicaEnv,
    make_topic: Callable[..., str],
    target_topics: list[str],
    tmp_path: Path,
    point: str,
) -> None:
    """Partition 1's first attempt fails in its first batch, before or after the target
    committed it; Spark (local[3,2]: two attempts per task) runs the task again, which
    fences the first attempt's transactional id and continues from the committed
    position."""
    topic = make_topic("repl-spark-retry", partitions=3, config=KEEP)
    target_topics.append(f"rt.{topic}")
    write_transactions(replica.source, topic, transactions=12, per_transaction=25)
    fired = tmp_path / "fired"
    job = run_job(
        replica,
        "--master",
        "local[3,2]",
        "--topics",
        topic,
        "--target-prefix",
        "rt.",
        "--batch-size",
        "20",
        **{FAILPOINTS: f"{point}=raise,partition=1,once={fired}"},
    )
    assert job.returncode == 0, job.stderr[-3000:]
    assert fired.exists(), "the task failure was never injected"
    assert "FailpointError" in job.stderr  # Spark saw the task fail and re-ran it
    source = read_log(replica.source, topic, 3)
    assert len(source[1]) > 20, "partition 1 fits in one batch: nothing left to resume"
    assert_replica(source, read_log(replica.target, f"rt.{topic}", 3))

    # The second attempt started where the target's position was: after the first
    # attempt's batch if it was committed, else where the first attempt started. The
    # job's total is what the successful attempts copied.
    starts = [
        int(offset)
        for offset in re.findall(
            rf"{re.escape(topic)}\[1\]: {re.escape(READY)}; copying from offset (\d+)",
            job.stderr,
        )
    ]
    assert len(starts) == 2 and starts[0] == 0, job.stderr[-3000:]
    if point == "after_commit":
        assert starts[1] > 0, "the retry did not continue from the committed position"
    else:
        assert starts[1] == 0, "the uncommitted batch moved the position"
    copied_first = sum(1 for r in source[1] if r.offset < starts[1])
    total = sum(map(len, source.values()))
    assert f"copied {total - copied_first} records from 3 source partitions" in job.stderr


def test_spark_job_fails_fast_with_one_line_on_a_missing_topic(replica: ReplicaEnv) -> None:
    missing = f"repl-spark-missing-{new_group()}"
    job = run_job(replica, "--topics", missing)
    assert job.returncode == 2, job.stderr[-3000:]
    errors = [line for line in job.stderr.splitlines() if line.startswith("replicate: error:")]
    assert errors == [
        f"replicate: error: source topic(s) {missing} do not exist on the source cluster"
    ]
