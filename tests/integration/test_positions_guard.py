"""A position can neither go back nor come from somewhere else (I3, docs/invariants.md).

- the positions group's offsets expire or are deleted: the relay must not read that as
  position 0 and publish the partition again;
- a position committed for another database, or by relays with another transactional-id
  prefix on the same group, is refused, not used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from relay import devenv
from relay.devenv.private import start_broker
from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.support import (
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


def _delete_group(admin: AdminClient, group: str) -> None:
    admin.delete_consumer_groups([group], request_timeout=30)[group].result(30)


def _committed_positions(admin: AdminClient, env: RelayTestEnv) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(f"{env.prefix}-positions")
    found = admin.list_consumer_group_offsets([request])[request.group_id].result(30)
    return {tp.partition: tp.offset for tp in found.topic_partitions if tp.offset >= 0}


def test_a_lost_positions_group_is_refused_and_nothing_is_published_twice(
    relay_env: RelayTestEnv, topic: str, kafka_admin: AdminClient
) -> None:
    ids = write_events(relay_env.database_url, topic, 200)
    first = run_relay(relay_env, "run", "--once", "--no-cleanup")
    assert first.returncode == 0, first.stderr
    assert len(_committed_positions(kafka_admin, relay_env)) == RELAY_PARTITIONS

    _delete_group(kafka_admin, f"{relay_env.prefix}-positions")  # as expiry or an ops tool
    second = run_relay(relay_env, "run", "--once", "--no-cleanup")

    assert second.returncode == 2, second.stderr
    assert "below what this database recorded as published" in second.stderr
    assert "relay positions restore" in second.stderr
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), ids)

    restored = run_relay(relay_env, "positions", "restore")
    assert restored.returncode == 0, restored.stderr
    third = run_relay(relay_env, "run", "--once", "--no-cleanup")
    assert third.returncode == 0, third.stderr
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), ids)


def test_a_position_committed_for_another_database_is_refused(
    relay_env: RelayTestEnv, topic: str, make_database: Callable[[], str]
) -> None:
    write_events(relay_env.database_url, topic, 50)
    assert run_relay(relay_env, "run", "--once").returncode == 0

    clone = replace(relay_env, database_url=make_database())  # same group, same prefix
    migrate(clone.database_url, RELAY_PARTITIONS)
    write_events(clone.database_url, topic, 400)  # more rows: seq numbers alone look fine
    refused = run_relay(clone, "run", "--once")

    assert refused.returncode == 2, refused.stderr
    assert "committed for another outbox database" in refused.stderr
    assert clone.sql("SELECT count(*) FROM outbox") == [(400,)]


def test_relays_with_another_prefix_on_the_same_group_are_refused(
    relay_env: RelayTestEnv, topic: str
) -> None:
    write_events(relay_env.database_url, topic, 50)
    assert run_relay(relay_env, "run", "--once").returncode == 0
    write_events(relay_env.database_url, topic, 50)

    other = run_relay(
        relay_env, "run", "--once", RELAY_TRANSACTIONAL_ID_PREFIX=f"{relay_env.prefix}-other"
    )

    assert other.returncode == 2, other.stderr
    assert "transactional-id prefix" in other.stderr
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(50,)]


@pytest.fixture
def short_retention_broker(tmp_path: Path) -> Iterator[str]:
    """A broker of the test's own that expires a group's offsets one minute after their
    last commit (checked every 2 s), as a production broker does after seven days."""
    workdir = tmp_path / "broker"
    overrides = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "2000"}
    try:
        yield start_broker(workdir, overrides)
    finally:
        devenv.stop_kafka(workdir, True)


def _group_offsets(bootstrap: str, group: str) -> list[TopicPartition]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group)
    found = admin.list_consumer_group_offsets([request])[group].result(30)
    return [tp for tp in found.topic_partitions if tp.offset >= 0]


@pytest.mark.long(70)
def test_idle_positions_outlive_the_brokers_offset_retention(
    database_url: str, short_retention_broker: str, tmp_path: Path
) -> None:
    env = RelayTestEnv(database_url, short_retention_broker, new_prefix())
    migrate(database_url, RELAY_PARTITIONS)
    admin = AdminClient({"bootstrap.servers": short_retention_broker})
    topic = f"{env.prefix}-events"
    admin.create_topics([NewTopic(topic, 3, replication_factor=1)])[topic].result(30)
    write_events(database_url, topic, 100)

    log = tmp_path / "relay.log"
    service = start_relay(env, "run", log=log, RELAY_POSITION_REFRESH_S="10")
    try:
        wait_until(
            lambda: env.sql("SELECT count(*) FROM outbox") == [(0,)], 60, "the relay to publish"
        )
        # A group committed once, after every position, and never again: when the broker
        # has expired it, it has expired every position that was not committed since.
        control = f"{env.prefix}-control"
        consumer = Consumer({"bootstrap.servers": short_retention_broker, "group.id": control})
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        consumer.close()
        wait_until(
            lambda: not _group_offsets(short_retention_broker, control),
            150,
            "the broker to expire the control group's offset",
        )
        kept = _group_offsets(short_retention_broker, f"{env.prefix}-positions")
        assert service.poll() is None, log.read_text()
    finally:
        service.terminate()
        service.wait(60)
    assert {tp.partition for tp in kept} == set(range(RELAY_PARTITIONS)), log.read_text()
    rerun = run_relay(env, "run", "--once")
    assert rerun.returncode == 0, rerun.stderr
