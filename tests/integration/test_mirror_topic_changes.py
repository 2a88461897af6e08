"""The mirror's stored offsets belong to one topic as it was: a topic deleted and created
again under the same name (another topic id) is refused until it is reset on purpose,
in `relay mirror --once`, continuously and in the Spark job; partitions added to a
mirrored topic are refused for a table whose versions are Kafka offsets and reported
otherwise, and the records' versions keep upserts in order across the partitions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions, NewTopic

from relay.devenv.topics import topic_ready
from relay.postgres import migrations
from relay.runtime.secrets import Secret
from tests.integration import support
from tests.integration.mirror_support import (
    MirrorEnv,
    TxProducer,
    item,
    items_mapping,
    items_state,
    last_stable_offsets,
    mirror_env,
)
from tests.integration.support import run_sql, wait_until

OUTBOX_SEQ = "header:outbox-seq"


def topic_id(admin: AdminClient, topic: str) -> str | None:
    """The topic's id in Kafka's base64 form; None while it does not exist."""
    try:
        found = admin.describe_topics(TopicCollection([topic]), request_timeout=10)[topic]
        return str(found.result(timeout=15).topic_id)
    except KafkaException:
        return None


def recreate(admin: AdminClient, topic: str, partitions: int) -> str:
    """Delete ``topic`` and create it again under the same name; its new id."""
    old = topic_id(admin, topic)
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    wait_until(lambda: topic_id(admin, topic) is None, 60, f"topic {topic} to be deleted")

    def created() -> bool:
        futures = admin.create_topics([NewTopic(topic, partitions, -1)], operation_timeout=30)
        try:
            futures[topic].result(timeout=60)
        except KafkaException:
            return False  # still being deleted on the broker
        return True

    wait_until(created, 60, f"topic {topic} to be created again")
    # The metadata may not name the new topic yet right after its creation: ask again.
    wait_until(
        lambda: topic_id(admin, topic) not in (None, old) and topic_ready(admin, topic, partitions),
        60,
        "leaders",
    )
    new = topic_id(admin, topic)
    assert new is not None and new != old
    return new


def stored_ids(env: MirrorEnv) -> list[tuple[object, ...]]:
    return env.sql(
        "SELECT partition, topic_id, topic_partitions FROM mirror_offsets "
        "WHERE consumer_group = :g ORDER BY partition",
        g=env.group,
    )


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "error:" in line]


def test_a_recreated_topic_is_refused_until_reset_then_mirrored_from_its_start(
    database_url: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    topic = make_topic("mirror-recreated", partitions=1)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic], OUTBOX_SEQ))
    old = [item(i, f"old{i}", i, outbox_seq=str(i + 1)) for i in range(5)]
    TxProducer(bootstrap_servers).transaction(topic, old)
    first = env.run("--once")
    assert first.returncode == 0, first.stderr
    old_id = topic_id(kafka_admin, topic)
    assert stored_ids(env) == [(0, old_id, 1)]
    stored = env.offsets()

    new_id = recreate(kafka_admin, topic, partitions=1)
    new = [item(i, f"new{i}", 100 + i, outbox_seq=str(100 + i)) for i in range(8)]
    TxProducer(bootstrap_servers).transaction(topic, new)  # offsets 0-7, past the stored 6

    refused = env.run("--once")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    (line,) = error_lines(refused.stderr)
    for part in (f"topic {topic}", old_id, new_id, f"--reset-recreated-topic {topic}"):
        assert part in line, line
    assert "Traceback" not in refused.stderr
    assert items_state(env) == {i: (f"old{i}", i) for i in range(5)}
    assert env.offsets() == stored

    job = support.run_job("mirror.py", env.env())
    assert job.returncode == 2, job.stderr[-3000:]
    assert new_id in "\n".join(error_lines(job.stderr))

    dry = env.run("--reset-recreated-topic", topic)
    assert dry.returncode == 2, dry.stdout + dry.stderr
    assert f"{topic}[0]: offset 6 of topic id {old_id} -> offset 0 of topic id {new_id}" in (
        dry.stdout
    )
    assert "nothing changed" in dry.stderr
    assert env.offsets() == stored

    reset = env.run("--reset-recreated-topic", topic, "--yes")
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert stored_ids(env) == [(0, new_id, 1)]
    again = env.run("--once")
    assert again.returncode == 0, again.stderr
    assert items_state(env) == {i: (f"new{i}", 100 + i) for i in range(8)}
    assert env.offsets() == last_stable_offsets(bootstrap_servers, topic)


def test_records_deleted_before_the_group_stored_an_offset_are_reported(
    database_url: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    """A group with no stored offset starts at the log's start; records deleted before it
    (retention, delete-records) are never in the table, and the mirror says so."""
    topic = make_topic("mirror-deleted", partitions=1)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic], OUTBOX_SEQ))
    producer = TxProducer(bootstrap_servers)
    producer.transaction(topic, [item(i, f"a{i}", i, outbox_seq=str(i + 1)) for i in range(5)])
    kept = [item(i, f"b{i}", i, outbox_seq=str(i + 1)) for i in range(5, 8)]
    producer.transaction(topic, kept)  # offsets 0-4, a marker (5), then 6-8
    deleted = kafka_admin.delete_records([TopicPartition(topic, 0, 6)])
    deleted[TopicPartition(topic, 0, 6)].result(30)

    done = env.run("--once")
    assert done.returncode == 0, done.stderr
    assert (
        f"{topic}[0]: offsets 0..5 were deleted from the log before group {env.group} "
        "stored an offset for it; mirroring from offset 6"
    ) in done.stderr
    assert items_state(env) == {i: (f"b{i}", i) for i in range(5, 8)}
    again = env.run("--once")
    assert again.returncode == 0, again.stderr
    assert "were deleted from the log" not in again.stderr  # an offset is stored now


def test_a_topic_recreated_under_a_running_mirror_stops_it_before_anything_is_applied(
    database_url: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    topic = make_topic("mirror-recreated-live", partitions=1)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic], OUTBOX_SEQ))
    old = [item(i, f"old{i}", i, outbox_seq=str(i + 1)) for i in range(5)]
    TxProducer(bootstrap_servers).transaction(topic, old)
    log = tmp_path / "mirror.log"
    mirror = env.start(log)
    try:
        wait_until(lambda: env.offsets() == {(topic, 0): 6}, 60, "the old topic to be mirrored")
        new_id = recreate(kafka_admin, topic, partitions=1)
        new = [item(i, f"new{i}", 100 + i, outbox_seq=str(100 + i)) for i in range(8)]
        TxProducer(bootstrap_servers).transaction(topic, new)
        wait_until(lambda: mirror.poll() is not None, 90, "the mirror to stop")
    finally:
        if mirror.poll() is None:
            mirror.terminate()
            mirror.wait(30)
    output = log.read_text()
    assert mirror.returncode == 2, output[-3000:]
    (line,) = error_lines(output)
    assert f"topic {topic}" in line and new_id in line, line
    assert items_state(env) == {i: (f"old{i}", i) for i in range(5)}
    assert env.offsets() == {(topic, 0): 6}


def test_offsets_stored_before_topic_ids_adopt_the_topic_they_continue(
    database_url: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    """A row written before 0008_mirror_topic_id (or by an older relay) has no topic id:
    the first batch records the topic's, then it is checked like any other."""
    topic = make_topic("mirror-adopt", partitions=1)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic], OUTBOX_SEQ))
    url = Secret(database_url)
    migrations.downgrade(url, "0007_commit_markers")
    records = [item(i, f"n{i}", i, outbox_seq=str(i + 1)) for i in range(6)]
    TxProducer(bootstrap_servers).transaction(topic, records)
    env.sql(
        "INSERT INTO mirror_offsets (consumer_group, topic, partition, next_offset) "
        "VALUES (:g, :t, 0, 3)",
        g=env.group,
        t=topic,
    )
    migrations.upgrade(url)
    assert stored_ids(env) == [(0, None, None)]

    result = env.run("--once")
    assert result.returncode == 0, result.stderr
    assert items_state(env) == {i: (f"n{i}", i) for i in range(3, 6)}
    assert stored_ids(env) == [(0, topic_id(kafka_admin, topic), 1)]


def _grow(admin: AdminClient, topic: str, partitions: int) -> None:
    admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(timeout=60)
    wait_until(lambda: topic_ready(admin, topic, partitions), 60, f"{topic} to grow")


def test_partitions_added_under_a_table_versioned_by_offsets_are_refused(
    database_url: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    """Kafka offsets order a key's records only while the key stays in one partition: the
    key's next record, in another partition at a lower offset, would never apply."""
    topic = make_topic("mirror-grown-offsets", partitions=2)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    producer = TxProducer(bootstrap_servers)
    producer.transaction(topic, [item(1, f"a{n}", n) for n in range(10)], partition=0)
    first = env.run("--once")
    assert first.returncode == 0, first.stderr
    assert items_state(env) == {1: ("a9", 9)}
    stored = env.offsets()

    _grow(kafka_admin, topic, 3)
    TxProducer(bootstrap_servers).transaction(topic, [item(1, "moved", 100)], partition=2)
    refused = env.run("--once")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    (line,) = error_lines(refused.stderr)
    for part in (f"topic {topic}", "from 2 to 3 partitions", "items", "offset"):
        assert part in line, line
    assert items_state(env) == {1: ("a9", 9)}
    assert env.offsets() == stored


def test_partitions_added_are_reported_and_versions_keep_upserts_in_order(
    database_url: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    """Key 1's older records (seq 4, 5) stay in partition 0, in a transaction still open,
    while its newer ones (seq 6, 7) in the new partition 2 are applied first; when the
    older ones apply at last, the version guard keeps the newer state."""
    topic = make_topic("mirror-grown", partitions=2)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic], OUTBOX_SEQ))
    producer = TxProducer(bootstrap_servers)
    producer.transaction(
        topic, [item(1, f"s{n}", n, outbox_seq=str(n)) for n in (1, 2, 3)], partition=0
    )
    first = env.run("--once")
    assert first.returncode == 0, first.stderr
    assert stored_ids(env) == [(0, topic_id(kafka_admin, topic), 2)]

    _grow(kafka_admin, topic, 3)
    older = TxProducer(bootstrap_servers)
    older.producer.begin_transaction()
    older.send(topic, [item(1, f"s{n}", n, outbox_seq=str(n)) for n in (4, 5)], partition=0)
    older.producer.flush(10)
    newer = [item(1, f"s{n}", n, outbox_seq=str(n)) for n in (6, 7)]
    TxProducer(bootstrap_servers).transaction(topic, newer, partition=2)
    second = env.run("--once")
    assert second.returncode == 0, second.stderr
    assert items_state(env) == {1: ("s7", 7)}
    warnings = [line for line in second.stderr.splitlines() if "from 2 to 3 partitions" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], second.stderr

    older.producer.commit_transaction(30)
    wait_until(
        lambda: last_stable_offsets(bootstrap_servers, topic)[(topic, 0)] == 7,
        30,
        "the older transaction's markers",
    )
    third = env.run("--once")
    assert third.returncode == 0, third.stderr
    assert items_state(env) == {1: ("s7", 7)}
    # Partition 0's stored offset predated the growth until now: reported again.
    assert "from 2 to 3 partitions" in third.stderr
    assert [(row[0], row[2]) for row in stored_ids(env)] == [(0, 3), (2, 3)]


def test_the_migration_adds_nullable_columns_and_goes_back(database_url: str) -> None:
    url = Secret(database_url)
    migrations.upgrade(url, "0007_commit_markers")
    run_sql(
        database_url,
        "INSERT INTO mirror_offsets (consumer_group, topic, partition, next_offset) "
        "VALUES ('g', 't', 0, 42)",
    )
    migrations.upgrade(url)
    rows = run_sql(
        database_url, "SELECT next_offset, topic_id, topic_partitions FROM mirror_offsets"
    )
    assert rows == [(42, None, None)]
    migrations.downgrade(url, "0007_commit_markers")
    assert run_sql(database_url, "SELECT * FROM mirror_offsets")[0][:4] == ("g", "t", 0, 42)
