"""Consumer failover between the two real dev clusters: `relay replicate --translate-group`
moves a group's committed source offsets to the target topics, so that its consumers
continue there with exactly the records they had not processed (docs/replication.md)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.replicate_support import (
    ReplicaEnv,
    Replicated,
    new_group,
    read_log,
)
from tests.integration.support import wait_until

pytestmark = pytest.mark.integration

PREFIX = "dr."


@pytest.fixture
def replica(bootstrap_servers: str, target_bootstrap_servers: str) -> ReplicaEnv:
    return ReplicaEnv(bootstrap_servers, target_bootstrap_servers, new_group())


@pytest.fixture
def group() -> str:
    return f"it-failover-app-{uuid.uuid4().hex[:10]}"


def write_with_aborts(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    transactions: int,
    per_partition: int,
    *,
    abort_every: int = 3,
    first: int = 0,
) -> int:
    """Transactions of ``per_partition`` records ``v<n>`` in each of ``partitions``; every
    ``abort_every``-th is aborted (0: none). Each is flushed before it ends, so that an
    aborted one leaves its records in the log, behind its marker. Returns the next n."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"it-fo-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    n = first
    for t in range(transactions):
        producer.begin_transaction()
        for p in partitions:
            for _ in range(per_partition):
                producer.produce(topic, b"v%d" % n, b"k%d" % n, partition=p)
                n += 1
        producer.flush(30)
        if abort_every and t % abort_every == abort_every - 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    return n


def _consumer(bootstrap: str, group: str, extra: dict[str, str | bool] | None = None) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            **(extra or {}),
        }
    )


def consume_and_commit(
    bootstrap: str, group: str, topic: str, consumed: dict[int, int], commit: dict[int, int]
) -> None:
    """A consumer of ``group`` reads ``consumed[p]`` records of each partition, then
    commits ``commit[p]`` (the next offset it would read, maybe past markers)."""
    consumer = _consumer(bootstrap, group)
    try:
        for p, count in consumed.items():
            consumer.assign([TopicPartition(topic, p, 0)])
            for _ in range(count):
                message = consumer.poll(30)
                assert message is not None and message.error() is None, f"{topic}[{p}]"
        offsets = [TopicPartition(topic, p, offset) for p, offset in commit.items()]
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """``group``'s committed offsets of ``topic`` (partitions without one left out)."""
    consumer = _consumer(bootstrap, group)
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        found = consumer.committed(wanted, timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def last_stable_offset(bootstrap: str, topic: str, partition: int) -> int:
    consumer = _consumer(bootstrap, f"it-lso-{uuid.uuid4().hex}")
    try:
        tp = TopicPartition(topic, partition)
        return int(consumer.get_watermark_offsets(tp, timeout=30, cached=False)[1])
    finally:
        consumer.close()


def resume_on_target(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, list[Replicated]]:
    """What a consumer of ``group`` that subscribes to ``topic`` on the target reads, from
    the group's committed offsets to the end of each partition."""
    consumer = _consumer(
        bootstrap, group, {"enable.partition.eof": True, "auto.offset.reset": "earliest"}
    )
    found: dict[int, list[Replicated]] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    deadline = time.monotonic() + 90
    consumer.subscribe([topic])
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"ended: {ended}, read: {found}"
            message = consumer.poll(1)
            if message is None:
                continue
            err = message.error()
            if err is not None:
                assert err.code() == err._PARTITION_EOF, str(err)
                ended.add(message.partition() or 0)
                continue
            found[message.partition() or 0].append(
                Replicated(
                    message.partition() or 0,
                    message.offset() or 0,
                    message.key(),
                    message.value(),
                    tuple(message.headers() or ()),  # type: ignore[arg-type]
                    message.timestamp()[1],
                )
            )
    finally:
        consumer.close()
    return found


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
    active = _consumer(replica.target, group, {"auto.offset.reset": "earliest"})
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
