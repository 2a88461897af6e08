"""Default groups unique to a deployment (issue 23): `relay mirror` and `relay replicate`
without --group take a group of their own (from the mirror database's id, from the source
cluster's id), except where the earlier fixed default (`relay-mirror`, `relay-replicate`)
holds their stored offsets or positions: that group is kept, so nothing is applied or
copied twice after an upgrade."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from relay.commands.replicate import plan_replication, with_end_offsets
from relay.settings.mirror import LEGACY_GROUP as LEGACY_MIRROR_GROUP
from relay.settings.replicate import load_replicate_settings
from relay.settings.replicate_spec import LEGACY_GROUP as LEGACY_REPLICATE_GROUP
from tests.integration.mirror_support import TxProducer, item, items_mapping, mirror_env
from tests.integration.replicate_support import (
    ReplicaEnv,
    assert_replica,
    read_log,
    write_transactions,
)
from tests.integration.support import run_sql

pytestmark = pytest.mark.integration


def _groups(database_url: str) -> dict[str, int]:
    """The stored next offset of partition 0, by group."""
    rows = run_sql(database_url, "SELECT consumer_group, next_offset FROM mirror_offsets")
    return {str(g): int(str(n)) for g, n in rows}


def _audit(database_url: str) -> list[tuple[object, ...]]:
    return run_sql(database_url, "SELECT id, count(*) FROM items_audit GROUP BY id ORDER BY id")


def test_the_mirror_takes_a_group_of_its_database_unless_the_old_default_holds_offsets(
    database_url: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = make_topic("default-group", partitions=1)
    given = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    env = dataclasses.replace(given, group="")  # no group given
    producer = TxProducer(bootstrap_servers)
    producer.transaction(topic, [item(1, "a", 1), item(2, "b", 2)])
    database_id = str(run_sql(database_url, "SELECT database_id FROM outbox_identity")[0][0])
    derived = f"relay-mirror-{database_id.replace('-', '')[:8]}"

    first = env.run("--once")
    assert first.returncode == 0, first.stderr
    assert _groups(database_url) == {derived: 3}  # two records and the commit marker
    assert f"mirror group {derived}: " in first.stderr

    # An upgraded deployment: its offsets are stored under the old fixed default.
    run_sql(database_url, "UPDATE mirror_offsets SET consumer_group = :g", g=LEGACY_MIRROR_GROUP)
    producer.transaction(topic, [item(3, "c", 3)])
    second = env.run("--once")
    assert second.returncode == 0, second.stderr
    assert _groups(database_url) == {LEGACY_MIRROR_GROUP: 5}  # kept: nothing applied twice
    assert _audit(database_url) == [(1, 1), (2, 1), (3, 1)]
    (said,) = [line for line in second.stderr.splitlines() if "mirror group " in line]
    assert f"mirror group {LEGACY_MIRROR_GROUP}: it holds the stored offsets" in said


@pytest.fixture
def default_groups(bootstrap_servers: str, target_bootstrap_servers: str) -> Iterator[str]:
    """The replicator's default group for the dev source cluster; it and the old default
    hold positions on the shared target cluster only while the test runs."""
    source = AdminClient({"bootstrap.servers": bootstrap_servers})
    derived = f"relay-replicate-{source.describe_cluster().result(30).cluster_id}"
    yield derived
    admin = AdminClient({"bootstrap.servers": target_bootstrap_servers})
    for group in (LEGACY_REPLICATE_GROUP, derived):
        try:
            admin.delete_consumer_groups([group])[group].result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                raise


def test_the_replicator_takes_a_group_of_its_source_unless_the_old_default_holds_positions(
    bootstrap_servers: str,
    target_bootstrap_servers: str,
    make_topic: Callable[..., str],
    default_groups: str,
) -> None:
    replica = ReplicaEnv(bootstrap_servers, target_bootstrap_servers, "")
    derived = default_groups

    topic = make_topic("default-group", partitions=1)
    write_transactions(replica.source, topic, transactions=2, per_transaction=5)
    fresh = replica.run("--once", "--topics", topic, "--target-prefix", "new.")
    assert fresh.returncode == 0, fresh.stderr
    assert f"replicator group {derived}: " in fresh.stderr

    # An upgraded deployment: it copied under the old fixed default before.
    old = make_topic("default-group-old", partitions=1)
    write_transactions(replica.source, old, transactions=2, per_transaction=5)
    args = ("--once", "--topics", old, "--target-prefix", "old.")
    before = replica.run(*args, RELAY_REPLICATE_GROUP=LEGACY_REPLICATE_GROUP)
    assert before.returncode == 0, before.stderr
    write_transactions(replica.source, old, transactions=2, per_transaction=5)
    after = replica.run(*args)
    assert after.returncode == 0, after.stderr
    assert f"replicator group {LEGACY_REPLICATE_GROUP}: it holds positions" in after.stderr
    # kept: the second run copied only what was new, nothing twice
    assert_replica(read_log(replica.source, old, 1), read_log(replica.target, f"old.{old}", 1))


def test_the_spark_drivers_plan_resolves_the_default_group(
    bootstrap_servers: str,
    target_bootstrap_servers: str,
    make_topic: Callable[..., str],
    default_groups: str,
) -> None:
    """The replicate job's driver plans (jobs/replicate.py: plan_replication, then the end
    offsets) without a group given; its tasks carry the group it resolved."""
    topic = make_topic("default-group-job", partitions=2)
    write_transactions(bootstrap_servers, topic, transactions=2, per_transaction=5)
    env = ReplicaEnv(bootstrap_servers, target_bootstrap_servers, "").env()
    settings = load_replicate_settings({"replicate_topics": topic}, env)
    assert settings.group_name is None
    tasks = with_end_offsets(settings, plan_replication(settings).tasks())
    assert {t.group for t in tasks} == {default_groups}
    assert sorted(t.end_offset or 0 for t in tasks) > [0, 0]
