"""`relay replicate` between the two real dev clusters: committed records only, once each,
in order and as they were (I7, I8, docs/invariants.md)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from confluent_kafka.admin._resource import ResourceType

from relay.devenv.endpoints import SaslEndpoint
from relay.devenv.ports import free_ports
from relay.replication.startup import READY
from relay.runtime.failpoints import ENV_VAR as FAILPOINTS
from tests.integration.replicate_support import (
    ReplicaEnv,
    Replicated,
    assert_replica,
    read_log,
    write_transactions,
)
from tests.integration.support import wait_until
from tests.integration.test_metrics import by_label, get, scrape

pytestmark = pytest.mark.integration


def test_once_copies_exactly_the_committed_records(
    replica: ReplicaEnv, make_topic: Callable[..., str]
) -> None:
    topic = make_topic("repl", partitions=3)
    write_transactions(replica.source, topic, transactions=12, per_transaction=25)
    done = replica.run("--once", "--topics", topic, "--target-prefix", "dr.")
    assert done.returncode == 0, done.stderr
    source, target = read_log(replica.source, topic, 3), read_log(replica.target, f"dr.{topic}", 3)
    assert sum(map(len, source.values())) == 9 * 25  # 3 of the 12 transactions aborted
    # ... and their records are in the source's log: 300 records and 12 markers per
    # partition that a transaction wrote to (read_uncommitted would see them all).
    assert _log_end(replica.source, topic, 3) >= 12 * 25 + 12
    assert_replica(source, target)
    # Progress counts source offsets, markers and aborted records included: it ends at
    # 100 %, and the summary tells the records copied from the offsets skipped.
    end = _log_end(replica.source, topic, 3)
    progress = [line for line in done.stderr.splitlines() if " relay.progress: " in line]
    assert progress[-1].split(": ", 1)[1].startswith(f"copied: {end:,} of {end:,} offsets (100%)")
    assert f"copied {9 * 25} records, skipped {end - 9 * 25} source offsets" in done.stdout
    headers = dict(target[0][0].headers)
    assert headers["relay-source-cluster"] == b"east"
    assert headers["relay-source-topic"] == topic.encode()
    assert headers["relay-source-partition"] == b"0"
    again = replica.run("--once", "--topics", topic, "--target-prefix", "dr.")
    assert again.returncode == 0, again.stderr
    assert "copied 0 records" in again.stdout
    assert read_log(replica.target, f"dr.{topic}", 3) == target


@pytest.mark.parametrize("point", ["startup", "after_produce", "after_commit"])
def test_kill_9_at_a_dangerous_point_loses_and_duplicates_nothing(
    replica: ReplicaEnv, make_topic: Callable[..., str], tmp_path: Path, point: str
) -> None:
    topic = make_topic("repl-kill", partitions=2)
    write_transactions(replica.source, topic, transactions=8, per_transaction=50)
    args = ("--once", "--topics", topic, "--target-prefix", "k.", "--batch-size", "60")
    spec = f"{point}=kill,partition=1,once={tmp_path / 'fired'}"
    killed = replica.run(*args, **{FAILPOINTS: spec})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (tmp_path / "fired").exists()
    rerun = replica.run(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert_replica(read_log(replica.source, topic, 2), read_log(replica.target, f"k.{topic}", 2))


def test_a_second_instance_takes_half_of_the_partitions_and_nothing_is_duplicated(
    replica: ReplicaEnv, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Two continuous instances share the partitions through their members group: the
    second one takes one of the two over (the first hands it on after its open
    transaction, and fences nothing of the other's), and both go on."""
    topic = make_topic("repl-two", partitions=2)
    n = write_transactions(replica.source, topic, transactions=4, per_transaction=20)
    args = ("--topics", topic, "--target-prefix", "two.", "--max-wait", "0.01")
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    first = replica.start(*args, log=logs[0])
    second: subprocess.Popen[str] | None = None
    try:
        committed = len(read_log(replica.source, topic, 2)[0]) + len(
            read_log(replica.source, topic, 2)[1]
        )
        wait_until(
            lambda: _count(replica.target, f"two.{topic}") == committed,
            60,
            "the first instance to copy the backlog",
            logs[0].read_text,
        )
        second = replica.start(*args, log=logs[1])
        wait_until(
            lambda: logs[1].read_text().count(f"{READY}; copying from offset") == 1,
            60,
            "the second instance to take a partition over",
            logs[1].read_text,
        )
        assert "handing source partitions [" in logs[0].read_text(), logs[0].read_text()
        write_transactions(replica.source, topic, transactions=4, per_transaction=20, first=n)
        source = read_log(replica.source, topic, 2)
        wait_until(
            lambda: _count(replica.target, f"two.{topic}") >= sum(map(len, source.values())),
            60,
            "both instances to copy the new records",
            lambda: logs[0].read_text() + logs[1].read_text(),
        )
        assert first.poll() is None, logs[0].read_text()
        assert "another replicator instance" not in logs[0].read_text()
        for process, log in zip((first, second), logs, strict=True):
            process.send_signal(signal.SIGTERM)
            assert process.wait(60) == 0, log.read_text()
        assert_replica(source, read_log(replica.target, f"two.{topic}", 2))
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def _log_end(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of the partitions' high watermarks: every record and marker written."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "it-watermarks"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


def _count(bootstrap: str, topic: str) -> int:
    """The committed records of ``topic`` (0 while it does not exist)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None:
        return 0
    return sum(map(len, read_log(bootstrap, topic, len(found.partitions)).values()))


def test_a_compacted_topic_keeps_its_policy_and_its_tombstones(
    replica: ReplicaEnv, make_topic: Callable[..., str], target_kafka_admin: AdminClient
) -> None:
    topic = make_topic(
        "repl-compact",
        partitions=1,
        config={"cleanup.policy": "compact", "retention.ms": "3600000"},
    )
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": replica.source})
    for key, value in [(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"b", b"3")]:
        producer.produce(topic, key=key, value=value)
    producer.flush(30)
    done = replica.run("--once", "--topics", topic, "--target-prefix", "c.")
    assert done.returncode == 0, done.stderr
    target = read_log(replica.target, f"c.{topic}", 1)
    assert [(r.key, r.value) for r in target[0]] == [
        (b"a", b"1"),
        (b"b", b"2"),
        (b"a", None),
        (b"b", b"3"),
    ]
    resource = ConfigResource(ResourceType.TOPIC, f"c.{topic}")
    configs = target_kafka_admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "3600000"


def test_a_source_partition_added_while_running_is_copied_in_place(
    replica: ReplicaEnv, make_topic: Callable[..., str], kafka_admin: AdminClient, tmp_path: Path
) -> None:
    topic = make_topic("repl-grow", partitions=1)
    write_transactions(replica.source, topic, transactions=2, per_transaction=10, abort_every=0)
    log = tmp_path / "replicate.log"
    process = replica.start(
        "--topics", topic, "--target-prefix", "g.", "--topic-refresh", "0.5", log=log
    )
    try:
        wait_until(lambda: _count(replica.target, f"g.{topic}") == 20, 60, "the first copies")
        kafka_admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
        write_transactions(
            replica.source, topic, transactions=1, per_transaction=5, first=100, partition=1
        )
        wait_until(
            lambda: len(_partition(replica.target, f"g.{topic}", 1)) == 5,
            60,
            "the new partition's records on the target",
            log.read_text,
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert_replica(read_log(replica.source, topic, 2), read_log(replica.target, f"g.{topic}", 2))
    assert "new source partition" in log.read_text()


def _partition(bootstrap: str, topic: str, partition: int) -> list[Replicated]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or len(found.partitions) <= partition:
        return []
    return read_log(bootstrap, topic, partition + 1)[partition]


def test_a_target_topic_with_fewer_partitions_is_refused(
    replica: ReplicaEnv, make_topic: Callable[..., str], target_kafka_admin: AdminClient
) -> None:
    topic = make_topic("repl-narrow", partitions=3)
    target_kafka_admin.create_topics([NewTopic(f"n.{topic}", 1, 1)])[f"n.{topic}"].result(30)
    done = replica.run("--once", "--topics", topic, "--target-prefix", "n.")
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]  # one line, after the log lines
    assert last.startswith(f"relay: error: target topic n.{topic} has 1 partitions, its source")


def test_a_position_of_another_source_is_refused(
    replica: ReplicaEnv, make_topic: Callable[..., str]
) -> None:
    topic = make_topic("repl-origin", partitions=1)
    write_transactions(replica.source, topic, transactions=1, per_transaction=5, abort_every=0)
    assert replica.run("--once", "--topics", topic, "--target-prefix", "o.").returncode == 0
    other = replica.run(
        "--once", "--topics", topic, "--target-prefix", "o.", "--source-alias", "west"
    )
    assert other.returncode == 2
    assert "committed for source 'east'" in other.stderr


def test_relay_replicate_serves_copies_lag_and_readiness(
    replica: ReplicaEnv, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("repl-metrics", partitions=2)
    write_transactions(replica.source, topic, transactions=4, per_transaction=10)
    (port,) = free_ports(1)
    log = tmp_path / "replicate.log"
    process = replica.start(
        "--topics", topic, "--target-prefix", "m.", "--metrics-port", str(port), log=log
    )
    try:
        wait_until(lambda: get(port, "/readyz") == (200, "ready\n"), 60, "/readyz", log.read_text)

        def copied() -> dict[str, float]:
            return by_label(scrape(port), "relay_replicate_records_copied_total", "partition")

        wait_until(
            lambda: sum(copied().values()) == 30,
            60,
            "30 copies counted",
            lambda: f"{copied()}\n{log.read_text()}",
        )

        def lag() -> dict[str, float]:
            return by_label(scrape(port), "relay_replicate_lag_records", "partition")

        # Caught up: the last transaction was aborted, and its records and markers count
        # as read once the reader is past them.
        wait_until(lambda: lag() == {"0": 0.0, "1": 0.0}, 30, "no lag", lambda: str(lag()))
        samples = scrape(port)
        assert samples[("relay_ready", ())] == 1.0
        # Each copy timed from its source timestamp (write_transactions stamps them a minute
        # back), as MirrorMaker 2's replication-latency-ms (to the target commit) and
        # record-age-ms (to the read).
        for name in ("relay_replicate_latency_seconds", "relay_replicate_record_age_seconds"):
            assert samples[(f"{name}_count", ())] == 30, name
            assert 30 * 59 < samples[(f"{name}_sum", ())] < 30 * (60 + 300), name
        assert (
            samples[("relay_replicate_record_age_seconds_sum", ())]
            <= samples[("relay_replicate_latency_seconds_sum", ())]
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()


def test_records_deleted_on_the_source_before_they_were_copied_are_skipped_with_a_warning(
    replica: ReplicaEnv, make_topic: Callable[..., str], kafka_admin: AdminClient
) -> None:
    topic = make_topic("repl-retention", partitions=1)
    n = write_transactions(replica.source, topic, transactions=1, per_transaction=10, abort_every=0)
    args = ("--once", "--topics", topic, "--target-prefix", "r.")
    assert replica.run(*args).returncode == 0
    write_transactions(
        replica.source, topic, transactions=1, per_transaction=10, abort_every=0, first=n
    )
    # Retention deletes offsets up to 14 before the next run; the first run's position is
    # 10 (offset 10 is the first transaction's marker, the second's records are 11..20).
    deleted = kafka_admin.delete_records([TopicPartition(topic, 0, 15)])
    deleted[TopicPartition(topic, 0, 15)].result(30)
    again = replica.run(*args)
    assert again.returncode == 0, again.stderr
    assert "offsets 10..14 were deleted on the source (retention)" in again.stderr
    copies = read_log(replica.target, f"r.{topic}", 1)[0]
    assert [c.source_offset() for c in copies] == [*range(10), *range(15, 21)]


def test_each_side_has_its_own_login_and_no_secret_is_shown(
    replica: ReplicaEnv, make_topic: Callable[..., str], sasl_endpoint: SaslEndpoint
) -> None:
    topic = make_topic("repl-sasl", partitions=1)
    write_transactions(replica.source, topic, transactions=2, per_transaction=5, abort_every=0)
    login = (
        "security.protocol=SASL_PLAINTEXT;sasl.mechanism=PLAIN;"
        f"sasl.username={sasl_endpoint.username};sasl.password={sasl_endpoint.password}"
    )
    args = ("--once", "--topics", topic, "--target-prefix", "s.", "--log-level", "DEBUG")
    done = replica.run(
        *args,
        RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS=sasl_endpoint.bootstrap_servers,
        RELAY_REPLICATE_SOURCE_PROPERTIES=login,
    )
    assert done.returncode == 0, done.stderr
    assert read_log(replica.target, f"s.{topic}", 1)[0] != []
    wrong = replica.run(
        *args,
        RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS=sasl_endpoint.bootstrap_servers,
        RELAY_REPLICATE_SOURCE_PROPERTIES=login.replace(sasl_endpoint.password, "not-the-password"),
        RELAY_REPLICATE_KAFKA_TIMEOUT_S="5",
    )
    assert wrong.returncode == 4
    last = wrong.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"relay: error: Kafka authentication failed at {sasl_endpoint.bootstrap_servers}"
    )
    for output in (done.stdout + done.stderr, wrong.stdout + wrong.stderr):
        assert sasl_endpoint.password not in output
        assert "not-the-password" not in output
