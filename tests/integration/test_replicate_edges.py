"""`relay replicate` at the edges, on the two dev clusters: a source topic created again, the
group's positions deleted or moved, two transactional-id prefixes on one group, a target
topic created again, a record that fits only compressed, a fatal error mid-transaction
(docs/replication.md, "When the positions do not fit")."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka._model import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from relay.replication.startup import READY
from relay.runtime.failpoints import ENV_VAR as FAILPOINTS
from tests.integration.replicate_support import (
    ReplicaEnv,
    assert_replica,
    read_log,
    recreate_topic,
    write_transactions,
)
from tests.integration.support import wait_until

pytestmark = pytest.mark.integration


def _paused_after_copying(
    replica: ReplicaEnv, topic: str, prefix: str, log: Path
) -> subprocess.Popen[str]:
    """A continuous replicator of ``topic`` (20 records), stopped (SIGSTOP) once it
    copied them."""
    process = replica.start(
        "--topics", topic, "--target-prefix", prefix, "--max-wait", "0.05",
        "--topic-refresh", "1", log=log,
    )  # fmt: skip
    try:
        wait_until(
            lambda: len(read_log(replica.target, f"{prefix}{topic}", 1)[0]) == 20,
            60,
            "the first records copied",
            log.read_text,
        )
    except BaseException:
        process.kill()
        process.wait()
        raise
    process.send_signal(signal.SIGSTOP)
    return process


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def test_a_recreated_source_topic_is_refused_until_reset(
    replica: ReplicaEnv, make_topic: Callable[..., str], kafka_admin: AdminClient
) -> None:
    topic = make_topic("edge-recreate", partitions=1)
    n = write_transactions(replica.source, topic, 2, 10, abort_every=0)
    args = ("--once", "--topics", topic, "--target-prefix", "rc.")
    assert replica.run(*args).returncode == 0  # position 21: after the 20th record
    old = read_log(replica.target, f"rc.{topic}", 1)[0]
    recreate_topic(kafka_admin, topic)
    write_transactions(replica.source, topic, 3, 10, abort_every=0, first=n)  # end 33 > 22
    refused = replica.run(*args)
    assert refused.returncode == 2, refused.stderr
    last = _last_line(refused.stderr)
    assert f"source topic {topic} was deleted and created again" in last
    assert f"relay replicate --reset-recreated-topic {topic}" in last
    assert read_log(replica.target, f"rc.{topic}", 1)[0] == old  # nothing copied
    shown = replica.run(
        "--topics", topic, "--target-prefix", "rc.", "--reset-recreated-topic", topic
    )
    assert shown.returncode == 2, shown.stderr
    assert f"{topic}[0]: offset 21 of topic id" in shown.stdout
    done = replica.run(
        "--topics", topic, "--target-prefix", "rc.", "--reset-recreated-topic", topic, "--yes"
    )
    assert done.returncode == 0, done.stderr
    again = replica.run(*args)
    assert again.returncode == 0, again.stderr
    copies = read_log(replica.target, f"rc.{topic}", 1)[0]
    assert copies[: len(old)] == old
    assert_replica(read_log(replica.source, topic, 1), {0: copies[len(old) :]})


def test_a_source_topic_recreated_while_the_replicator_is_paused_is_refused(
    replica: ReplicaEnv, make_topic: Callable[..., str], kafka_admin: AdminClient, tmp_path: Path
) -> None:
    topic = make_topic("edge-paused", partitions=1)
    n = write_transactions(replica.source, topic, 2, 10, abort_every=0)
    log = tmp_path / "replicate.log"
    process = _paused_after_copying(replica, topic, "rp.", log)
    try:
        recreate_topic(kafka_admin, topic)
        write_transactions(replica.source, topic, 4, 10, abort_every=0, first=n)
        process.send_signal(signal.SIGCONT)
        assert process.wait(90) == 2, log.read_text()
        assert f"source topic {topic} was deleted and created again" in log.read_text()
        assert len(read_log(replica.target, f"rp.{topic}", 1)[0]) == 20
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_deleted_group_is_refused_and_restored_from_the_copies(
    replica: ReplicaEnv, make_topic: Callable[..., str], target_kafka_admin: AdminClient
) -> None:
    topic = make_topic("edge-group", partitions=2)
    n = write_transactions(replica.source, topic, 8, 10)
    args = ("--once", "--topics", topic, "--target-prefix", "g.")
    assert replica.run(*args).returncode == 0
    target_kafka_admin.delete_consumer_groups([replica.group])[replica.group].result(30)
    before = read_log(replica.target, f"g.{topic}", 2)
    refused = replica.run(*args)
    assert refused.returncode == 2, refused.stderr
    assert "relay replicate --restore-positions" in _last_line(refused.stderr)
    assert read_log(replica.target, f"g.{topic}", 2) == before
    restore = ("--topics", topic, "--target-prefix", "g.", "--restore-positions")
    shown = replica.run(*restore)
    assert shown.returncode == 2, shown.stderr
    assert f"{topic}[0]: no position -> " in shown.stdout
    assert replica.run(*restore, "--yes").returncode == 0
    write_transactions(replica.source, topic, 4, 10, first=n)
    again = replica.run(*args)
    assert again.returncode == 0, again.stderr
    assert_replica(read_log(replica.source, topic, 2), read_log(replica.target, f"g.{topic}", 2))


def test_a_group_reset_to_the_targets_end_is_refused(
    replica: ReplicaEnv, make_topic: Callable[..., str], target_kafka_admin: AdminClient
) -> None:
    topic = make_topic("edge-latest", partitions=1)
    # Aborted transactions: the target's offsets fall behind the source's.
    n = write_transactions(replica.source, topic, 8, 10, abort_every=2)
    args = ("--once", "--topics", topic, "--target-prefix", "l.")
    assert replica.run(*args).returncode == 0
    watermarks = Consumer({"bootstrap.servers": replica.target, "group.id": "it-edge"})
    try:
        end = watermarks.get_watermark_offsets(TopicPartition(f"l.{topic}", 0), timeout=30)[1]
    finally:
        watermarks.close()
    moved = ConsumerGroupTopicPartitions(replica.group, [TopicPartition(f"l.{topic}", 0, end)])
    target_kafka_admin.alter_consumer_group_offsets([moved])[replica.group].result(30)
    write_transactions(replica.source, topic, 2, 10, abort_every=0, first=n)
    refused = replica.run(*args)
    assert refused.returncode == 2, refused.stderr
    assert "relay replicate --restore-positions" in _last_line(refused.stderr)
    assert (
        replica.run(
            "--topics", topic, "--target-prefix", "l.", "--restore-positions", "--yes"
        ).returncode
        == 0
    )
    assert replica.run(*args).returncode == 0
    assert_replica(read_log(replica.source, topic, 1), read_log(replica.target, f"l.{topic}", 1))


def test_another_transactional_id_prefix_on_the_same_group_is_refused(
    replica: ReplicaEnv, make_topic: Callable[..., str]
) -> None:
    topic = make_topic("edge-prefix", partitions=1)
    write_transactions(replica.source, topic, 2, 5, abort_every=0)
    args = ("--once", "--topics", topic, "--target-prefix", "p.")
    # Prefixes of this test's own: a prefix names its members group, which other tests'
    # replicators (killed ones count until their session times out) must not share.
    a, b = f"{replica.group}-a", f"{replica.group}-b"
    first = replica.run(*args, "--transactional-id-prefix", a)
    assert first.returncode == 0, first.stderr
    other = replica.run(*args, "--transactional-id-prefix", b)
    assert other.returncode == 2, other.stderr
    last = _last_line(other.stderr)
    assert f"transactional-id prefix '{a}', this one has '{b}'" in last


def test_a_target_topic_recreated_while_running_is_copied_again_from_the_start(
    replica: ReplicaEnv,
    make_topic: Callable[..., str],
    target_kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    topic = make_topic("edge-target", partitions=1)
    n = write_transactions(replica.source, topic, 2, 10, abort_every=0)
    log = tmp_path / "replicate.log"
    process = _paused_after_copying(replica, topic, "t.", log)
    try:
        recreate_topic(target_kafka_admin, f"t.{topic}")
        write_transactions(replica.source, topic, 2, 10, abort_every=0, first=n)
        process.send_signal(signal.SIGCONT)
        wait_until(
            lambda: len(read_log(replica.target, f"t.{topic}", 1)[0]) >= 40,
            90,
            "every source record copied to the new target topic",
            log.read_text,
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()
        assert log.read_text().count(f"{READY}; copying from offset 0") == 2
        assert_replica(
            read_log(replica.source, topic, 1), read_log(replica.target, f"t.{topic}", 1)
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_record_that_fits_the_source_compressed_is_copied_compressed(
    replica: ReplicaEnv, make_topic: Callable[..., str]
) -> None:
    topic = make_topic("edge-lz4", partitions=1)
    producer = Producer(
        {
            "bootstrap.servers": replica.source,
            "compression.type": "lz4",
            "message.max.bytes": 4_000_000,
        }
    )
    big = b"compressible " * 200_000  # 2.6 MB, some KB once compressed: above 1 MB
    producer.produce(topic, big, b"k")
    assert producer.flush(30) == 0
    done = replica.run("--once", "--topics", topic, "--target-prefix", "z.")
    assert done.returncode == 0, done.stderr
    assert [r.value for r in read_log(replica.target, f"z.{topic}", 1)[0]] == [big]


def test_a_fatal_error_inside_a_transaction_aborts_it_before_the_exit(
    replica: ReplicaEnv, make_topic: Callable[..., str]
) -> None:
    topic = make_topic("edge-abort", partitions=1)
    write_transactions(replica.source, topic, 2, 10, abort_every=0)
    failed = replica.run(
        "--once",
        "--topics",
        topic,
        "--target-prefix",
        "a.",
        # A long transaction timeout: an open transaction would hold the target's last
        # stable offset back for minutes.
        "--transaction-timeout-ms",
        "600000",
        **{FAILPOINTS: "before_commit=raise"},
    )
    assert failed.returncode == 1, failed.stderr
    committed, uncommitted = (
        Consumer({"bootstrap.servers": replica.target, "group.id": "it-edge", "isolation.level": i})
        for i in ("read_committed", "read_uncommitted")
    )
    try:
        tp = TopicPartition(f"a.{topic}", 0)

        def settled() -> bool:
            # No open transaction: the last stable offset is the high watermark.
            stable = committed.get_watermark_offsets(tp, timeout=10, cached=False)[1]
            return bool(stable == uncommitted.get_watermark_offsets(tp, 10, cached=False)[1])

        wait_until(settled, 15, "the open transaction aborted", lambda: failed.stderr)
    finally:
        committed.close()
        uncommitted.close()
    assert read_log(replica.target, f"a.{topic}", 1)[0] == []


def test_two_prefixes_started_together_on_one_group_are_told_apart_while_copying(
    replica: ReplicaEnv, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("edge-prefixes", partitions=1)
    args = ("--topics", topic, "--target-prefix", "pp.", "--max-wait", "0.05")
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    processes = [
        replica.start(*args, "--transactional-id-prefix", name, log=log)
        for name, log in zip((f"{replica.group}-a", f"{replica.group}-b"), logs, strict=True)
    ]
    try:
        for log in logs:  # both hold the partition, neither has seen a position
            wait_until(lambda log=log: READY in log.read_text(), 60, "both started", log.read_text)
        n = 0
        for _ in range(10):
            n = write_transactions(replica.source, topic, 1, 5, abort_every=0, first=n)
            if any(p.poll() is not None for p in processes):
                break
        wait_until(
            lambda: any(p.poll() is not None for p in processes),
            60,
            "one of them to stop",
            lambda: logs[0].read_text() + logs[1].read_text(),
        )
        stopped = next(p for p in processes if p.poll() is not None)
        assert stopped.returncode == 2
        text = "".join(log.read_text() for log in logs)
        assert "replicators with different prefixes do not fence each other" in text
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_recreated_source_topic_whose_group_was_deleted_too_is_reset(
    replica: ReplicaEnv,
    make_topic: Callable[..., str],
    kafka_admin: AdminClient,
    target_kafka_admin: AdminClient,
) -> None:
    topic = make_topic("edge-both", partitions=1)
    n = write_transactions(replica.source, topic, 2, 10, abort_every=0)
    args = ("--once", "--topics", topic, "--target-prefix", "bo.")
    assert replica.run(*args).returncode == 0
    old = read_log(replica.target, f"bo.{topic}", 1)[0]
    recreate_topic(kafka_admin, topic)
    target_kafka_admin.delete_consumer_groups([replica.group])[replica.group].result(30)
    write_transactions(replica.source, topic, 1, 10, abort_every=0, first=n)
    reset = ("--topics", topic, "--target-prefix", "bo.", "--reset-recreated-topic", topic)
    done = replica.run(*reset, "--yes")
    assert done.returncode == 0, done.stderr
    assert f"{topic}[0]: no position (copies up to source offset 20) -> offset 0" in done.stdout
    again = replica.run(*args)
    assert again.returncode == 0, again.stderr
    copies = read_log(replica.target, f"bo.{topic}", 1)[0]
    assert copies[: len(old)] == old
    assert_replica(read_log(replica.source, topic, 1), {0: copies[len(old) :]})
