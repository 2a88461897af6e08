"""``relay_mirror_freshness`` over hand-written rows of its tables (0010_mirror_freshness):
the minimum over a table's topics, their partitions and every relay partition of each
outbox database, NULL until each has been heard from; only heartbeats below the stored
offset count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.support import RelayTestEnv

T0 = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)


class Rows:
    def __init__(self, env: RelayTestEnv) -> None:
        self.env = env

    def feeds(self, table: str, *topics: str) -> None:
        for topic in topics:
            self.env.sql(
                "INSERT INTO mirror_table_topics (consumer_group, table_name, topic) "
                "VALUES ('g', :t, :topic)",
                t=table,
                topic=topic,
            )

    def offset(self, topic: str, partition: int, next_offset: int, partitions: int) -> None:
        self.env.sql(
            "INSERT INTO mirror_offsets (consumer_group, topic, partition, next_offset, "
            "updated_at, topic_partitions) VALUES ('g', :t, :p, :o, now(), :n) "
            "ON CONFLICT (consumer_group, topic, partition) DO UPDATE SET next_offset = :o",
            t=topic,
            p=partition,
            o=next_offset,
            n=partitions,
        )

    def beat(
        self,
        topic: str,
        partition: int,
        relay_partition: int,
        seconds: int,
        *,
        relay_partitions: int = 2,
        database: str = "db1",
        offset: int = 0,
    ) -> None:
        self.env.sql(
            "INSERT INTO mirror_heartbeats (consumer_group, topic, partition, "
            "source_database_id, relay_partition, relay_partitions, complete_through, "
            "heartbeat_offset) VALUES ('g', :t, :p, :d, :r, :n, :at, :o)",
            t=topic,
            p=partition,
            d=database,
            r=relay_partition,
            n=relay_partitions,
            at=T0 + timedelta(seconds=seconds),
            o=offset,
        )

    def through(self, table: str) -> datetime | None:
        found = self.env.sql(
            "SELECT complete_through FROM relay_mirror_freshness "
            "WHERE consumer_group = 'g' AND table_name = :t",
            t=table,
        )
        assert len(found) == 1
        return found[0][0]  # type: ignore[return-value]


@pytest.fixture
def rows(relay_env: RelayTestEnv) -> Rows:
    return Rows(relay_env)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_minimum_once_every_partition_and_relay_partition_was_heard_from(rows: Rows) -> None:
    rows.feeds("t", "a")
    for partition in (0, 1):
        rows.offset("a", partition, 10, partitions=2)
    rows.beat("a", 0, 0, 5)
    rows.beat("a", 0, 1, 3)
    assert rows.through("t") is None  # partition 1 not heard from
    rows.beat("a", 1, 0, 7)
    assert rows.through("t") is None  # relay partition 1 not heard from in partition 1
    rows.beat("a", 1, 1, 9)
    assert rows.through("t") == at(3)


def test_a_table_is_as_complete_as_its_least_complete_topic(rows: Rows) -> None:
    rows.feeds("t", "a", "b")
    rows.feeds("u", "a")
    for topic, seconds in (("a", 8), ("b", 4)):
        rows.offset(topic, 0, 10, partitions=1)
        for relay_partition in (0, 1):
            rows.beat(topic, 0, relay_partition, seconds)
    assert (rows.through("t"), rows.through("u")) == (at(4), at(8))


def test_a_topic_without_heartbeats_leaves_its_tables_unknown(rows: Rows) -> None:
    rows.feeds("t", "a", "quiet")
    rows.offset("a", 0, 10, partitions=1)
    rows.offset("quiet", 0, 10, partitions=1)
    rows.beat("a", 0, 0, 5)
    rows.beat("a", 0, 1, 5)
    assert rows.through("t") is None


def test_the_relay_partition_count_of_the_newest_heartbeat_counts(rows: Rows) -> None:
    rows.feeds("t", "a")
    rows.offset("a", 0, 10, partitions=1)
    rows.beat("a", 0, 0, 5, relay_partitions=2)
    rows.beat("a", 0, 1, 6, relay_partitions=2)
    assert rows.through("t") == at(5)
    rows.env.sql(  # raised to 3: partition 0 says so first
        "UPDATE mirror_heartbeats SET complete_through = :at, relay_partitions = 3 "
        "WHERE relay_partition = 0",
        at=at(9),
    )
    assert rows.through("t") is None
    rows.beat("a", 0, 2, 7, relay_partitions=3)
    assert rows.through("t") == at(6)


def test_every_outbox_database_that_sent_heartbeats_counts(rows: Rows) -> None:
    rows.feeds("t", "a")
    rows.offset("a", 0, 10, partitions=1)
    for database, seconds in (("db1", 8), ("db2", 2)):
        for relay_partition in (0, 1):
            rows.beat("a", 0, relay_partition, seconds, database=database)
    assert rows.through("t") == at(2)


def test_only_heartbeats_below_the_stored_offset_count(rows: Rows) -> None:
    rows.feeds("t", "a")
    rows.offset("a", 0, 10, partitions=1)
    rows.beat("a", 0, 0, 5, offset=8)
    rows.beat("a", 0, 1, 5, offset=9)
    assert rows.through("t") == at(5)
    rows.offset("a", 0, 9, partitions=1)  # set back to replay: offset 9 is not applied now
    assert rows.through("t") is None
