"""Consumer failover between the two real dev clusters: `relay replicate --translate-group`
moves a group's committed source offsets to the target topics, so that its consumers
continue there with exactly the records they had not processed (docs/replication.md)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer

from tests.integration.replicate_support import (
    ReplicaEnv,
    committed,
    consume_and_commit,
    group_consumer,
    last_stable_offset,
    read_log,
    resume_on_target,
    write_with_aborts,
)
from tests.integration.support import wait_until

pytestmark = pytest.mark.integration

PREFIX = "dr."


@pytest.fixture
def group() -> str:
    return f"it-failover-app-{uuid.uuid4().hex[:10]}"


def test_a_group_resumes_on_the_target_with_exactly_the_records_it_had_not_processed(
    replica: ReplicaEnv, make_topic: Callable[..., str], group: str
) -> None:
    topic = make_topic("failover", partitions=3)
    write_with_aborts(replica.source, topic, (0, 1, 2), transactions=12, per_partition=5)
    args = ("--topics", topic, "--target-prefix", PREFIX)
    done = replica.run("--once", *args, "--batch-size", "7")
    assert done.returncode == 0, done.stderr
    source = read_log(replica.source, topic, 3)
    gaps = [b.offset - a.offset for a, b in zip(source[1], source[1][1:], strict=False)]
    assert max(gaps) > 2  # aborted records lie between committed ones, not only markers
    # Partition 0: committed as librdkafka does, the offset after the last record read.
    # Partition 1: as a Java consumer does, its position: past markers and aborted records.
    # Partition 2: nothing read, offset 0.
    between_transactions = [
        k for k in range(1, len(source[1])) if source[1][k].offset > source[1][k - 1].offset + 1
    ]
    cuts = {0: len(source[0]) // 2, 1: between_transactions[len(between_transactions) // 2], 2: 0}
    commit = {0: source[0][cuts[0] - 1].offset + 1, 1: source[1][cuts[1]].offset, 2: 0}
    consume_and_commit(replica.source, group, topic, cuts, commit)

    shown = replica.run("--translate-group", group, *args)
    assert shown.returncode == 2, shown.stderr
    assert "run it again with --yes" in shown.stderr
    assert shown.stdout.count("translated") == 3, shown.stdout
    assert committed(replica.target, group, PREFIX + topic, 3) == {}  # nothing changed

    applied = replica.run("--translate-group", group, *args, "--yes")
    assert applied.returncode == 0, applied.stderr
    assert f"committed 3 offsets for group {group} on the target cluster" in applied.stdout

    resumed = resume_on_target(replica.target, group, PREFIX + topic, 3)
    for p, records in source.items():
        unprocessed = records[cuts[p] :]
        assert [r.source_offset() for r in resumed[p]] == [r.offset for r in unprocessed], p
        assert [r.value for r in resumed[p]] == [r.value for r in unprocessed], p

    again = replica.run("--translate-group", group, *args)
    assert again.returncode == 0, again.stderr  # nothing would change any more
    assert again.stdout.count("translated, already committed") == 3, again.stdout


@pytest.fixture
def running_consumers() -> Iterator[list[Consumer]]:
    consumers: list[Consumer] = []
    yield consumers
    for consumer in consumers:
        consumer.close()


def test_caught_up_ahead_of_the_replicator_and_active_on_the_target(
    replica: ReplicaEnv,
    make_topic: Callable[..., str],
    group: str,
    running_consumers: list[Consumer],
) -> None:
    topic = make_topic("failover-ends", partitions=2)
    first = write_with_aborts(replica.source, topic, (0, 1), 3, 10, abort_every=2)
    args = ("--topics", topic, "--target-prefix", PREFIX)
    assert replica.run("--once", *args).returncode == 0
    write_with_aborts(replica.source, topic, (1,), 2, 10, abort_every=0, first=first)
    # The group read everything on the source: partition 0 is copied to the end, partition
    # 1 has 20 records the replicator has not copied yet. Both offsets are the last stable
    # offsets: past the last transaction's marker.
    ends = {p: last_stable_offset(replica.source, topic, p) for p in (0, 1)}
    consume_and_commit(replica.source, group, topic, {0: 20, 1: 40}, ends)
    target_topic = PREFIX + topic
    target_end = last_stable_offset(replica.target, target_topic, 0)

    shown = replica.run("--translate-group", group, *args)
    assert shown.returncode == 2, shown.stderr
    assert "caught up" in shown.stdout and "not replicated yet, not applied" in shown.stdout
    assert committed(replica.target, group, target_topic, 2) == {}

    # Applied where it can be; the partition ahead of the replicator is reported.
    partly = replica.run("--translate-group", group, *args, "--yes")
    assert partly.returncode == 2, partly.stderr
    assert f"{topic}[1]: not replicated yet" in partly.stderr
    assert "committed 1 offsets" in partly.stdout
    assert committed(replica.target, group, target_topic, 2) == {0: target_end}

    # Once the replicator caught up, the rest; but not while the group consumes there.
    assert replica.run("--once", *args).returncode == 0
    active = group_consumer(replica.target, group, {"auto.offset.reset": "earliest"})
    running_consumers.append(active)
    active.subscribe([target_topic])
    wait_until(lambda: (active.poll(0.2), active.assignment())[1] != [], 60, "an assignment")
    refused = replica.run("--translate-group", group, *args, "--yes")
    assert refused.returncode == 2, refused.stderr
    assert "active member" in refused.stderr
    assert committed(replica.target, group, target_topic, 2) == {0: target_end}
    active.close()
    running_consumers.clear()

    done = replica.run("--translate-group", group, *args, "--yes")
    assert done.returncode == 0, done.stderr
    assert "caught up, already committed" in done.stdout
    new_end = last_stable_offset(replica.target, target_topic, 1)
    assert committed(replica.target, group, target_topic, 2) == {0: target_end, 1: new_end}
    assert resume_on_target(replica.target, group, target_topic, 2) == {0: [], 1: []}
