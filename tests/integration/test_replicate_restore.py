"""`relay replicate --restore-positions` trusts the copies only where they are copies of
what the source holds now: after a source topic was created again and reset, a group
lost before anything of the new topic was copied must not take the old topic's last copy
for a position in the new one (docs/replication.md, "When the positions do not fit")."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.replicate_support import (
    ReplicaEnv,
    assert_replica,
    new_group,
    read_log,
    recreate_topic,
    write_transactions,
)

pytestmark = pytest.mark.integration


def test_restoring_after_a_reset_does_not_take_the_old_topics_copies_for_the_new_one(
    bootstrap_servers: str,
    target_bootstrap_servers: str,
    make_topic: Callable[..., str],
    kafka_admin: AdminClient,
    target_kafka_admin: AdminClient,
) -> None:
    replica = ReplicaEnv(bootstrap_servers, target_bootstrap_servers, new_group())
    topic = make_topic("restore-old", partitions=1)
    n = write_transactions(replica.source, topic, 2, 10, abort_every=0)
    selection = ("--topics", topic, "--target-prefix", "ro.")
    assert replica.run("--once", *selection).returncode == 0  # position 21
    old = read_log(replica.target, f"ro.{topic}", 1)[0]
    recreate_topic(kafka_admin, topic)
    reset = replica.run(*selection, "--reset-recreated-topic", topic, "--yes")
    assert reset.returncode == 0, reset.stderr
    # The group is lost before anything of the new topic was copied, and the new topic
    # grows past the old position: its offsets 0..20 are records the target never saw.
    # Transactions of 6 put a commit marker at offset 20, where the old topic's last
    # copied record was: no record of the new topic is there to compare with.
    target_kafka_admin.delete_consumer_groups([replica.group])[replica.group].result(30)
    write_transactions(replica.source, topic, 4, 6, abort_every=0, first=n)
    restored = replica.run(*selection, "--restore-positions", "--yes")
    assert restored.returncode == 0, restored.stderr
    assert f"{topic}[0]: no position; its last copy (source offset 20) is not" in restored.stdout
    assert f"--reset-recreated-topic {topic}" in restored.stdout
    again = replica.run(*selection, "--reset-recreated-topic", topic, "--yes")
    assert again.returncode == 0, again.stderr
    assert replica.run("--once", *selection).returncode == 0
    copies = read_log(replica.target, f"ro.{topic}", 1)[0]
    assert copies[: len(old)] == old  # the old topic's copies stay
    assert_replica(read_log(replica.source, topic, 1), {0: copies[len(old) :]})
