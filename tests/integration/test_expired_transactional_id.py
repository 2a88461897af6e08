"""A zombie that comes back after the broker expired its transactional id (issue 11,
point 9; I3).

Instance Z publishes a batch and is paused (failpoint ``hold`` after the commit).
Instance N takes the partition over and publishes everything, keeping the rows
(``--no-cleanup``, as when a kill lands between the commit and the delete), then stops.
The broker expires the transactional id (``transactional.id.expiration.ms``, seven days
by default, two seconds here). When Z resumes, nobody fences it: its next transaction
fails, the abort gives it a new producer id, and a relay that retried from the position
it had before the pause would publish N's rows again. Z must read the position again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from relay import devenv
from relay.devenv.private import start_broker
from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.support import (
    PARTITION_ROWS,
    RelayTestEnv,
    assert_exactly_once_in_order,
    migrate,
    new_prefix,
    read_committed,
    run_relay,
    start_relay,
    wait_until,
)
from tests.integration.writes import write_events

_STATE_TOPIC = "__transaction_state"


@pytest.fixture
def expiring_broker(tmp_path: Path) -> Iterator[str]:
    """A broker of the test's own that forgets a transactional id two seconds after its
    last transaction ended (checked every half second)."""
    workdir = tmp_path / "broker"
    overrides = {
        "transactional.id.expiration.ms": "2000",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "500",
    }
    try:
        yield start_broker(workdir, overrides)
    finally:
        devenv.stop_kafka(workdir, True)


def _forgotten(bootstrap: str, transactional_id: str) -> bool:
    """Whether the broker has forgotten ``transactional_id``: the last record of its key in
    the transaction log (the key ends with the id's UTF-8 bytes) is a tombstone, written
    when the id expires. Not merely any tombstone: on a loaded machine the second instance
    may start more than the expiry after the first one's last transaction, so the id
    expires once before that instance uses it again, and then again after."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"state-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(_STATE_TOPIC, timeout=10).topics[_STATE_TOPIC]
        consumer.assign([TopicPartition(_STATE_TOPIC, p, 0) for p in partitions.partitions])
        pending, suffix = set(partitions.partitions), transactional_id.encode()
        last_is_tombstone = False
        while pending:
            msg = consumer.poll(5)
            if msg is None:
                return False
            if msg.error() is not None:
                pending.discard(msg.partition())
                continue
            if (msg.key() or b"").endswith(suffix):
                last_is_tombstone = msg.value() is None
        return last_is_tombstone
    finally:
        consumer.close()


def test_a_zombie_back_after_its_transactional_id_expired_reads_the_position_again(
    database_url: str, expiring_broker: str, tmp_path: Path
) -> None:
    env = RelayTestEnv(database_url, expiring_broker, new_prefix())
    migrate(database_url, RELAY_PARTITIONS)
    topic = f"{env.prefix}-events"
    admin = AdminClient({"bootstrap.servers": expiring_broker})
    admin.create_topics([NewTopic(topic, 3, replication_factor=1)])[topic].result(30)
    write_events(database_url, topic, 400)
    ids = {int(i) for (i,) in env.sql(PARTITION_ROWS, p=0)}

    held, log = tmp_path / "held", tmp_path / "zombie.log"
    zombie = start_relay(
        env,
        "run",
        "--partitions",
        "0",
        "--batch-size",
        "10",
        log=log,
        RELAY_FAILPOINTS=f"after_commit=hold,once={held}",
    )
    try:
        wait_until(held.exists, 60, "the zombie to publish a batch and pause")
        taken_over = run_relay(env, "run", "--once", "--partitions", "0", "--no-cleanup")
        assert taken_over.returncode == 0, taken_over.stderr
        wait_until(
            lambda: _forgotten(expiring_broker, f"{env.prefix}-0"),
            60,
            "the broker to expire the transactional id",
        )
        new = write_events(database_url, topic, 40)
        ids |= {int(i) for (i,) in env.sql(PARTITION_ROWS, p=0)} & new
        Path(f"{held}.release").touch()
        wait_until(
            lambda: not env.sql(PARTITION_ROWS, p=0),
            60,
            "the zombie to publish the new rows and clean up",
            explain=log.read_text,
        )
        assert zombie.poll() is None, log.read_text()
    finally:
        zombie.terminate()
        zombie.wait(60)
    assert_exactly_once_in_order(read_committed(expiring_broker, topic), ids)
