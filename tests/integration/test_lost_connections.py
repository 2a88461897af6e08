"""The queries `relay run` asks many times a second, on the driver past SQLAlchemy: the
commit watch's (relay.postgres.outbox_partitions.CommittedTops: each relay partition's
highest committed marker, on a connection it keeps) and a partition's fetch
(relay.postgres.prepared). They answer as the rest of the source does, and a connection
the server ended is a retriable error, after which the next call connects again."""

from __future__ import annotations

import pytest

from relay.errors import RetriableError
from relay.postgres.engine import opened
from relay.postgres.outbox_partitions import CommittedTops
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.runtime.secrets import Secret
from tests.integration.support import RelayTestEnv, draw
from tests.integration.writes import write_events

pytestmark = pytest.mark.integration

PARTITIONS = [0, 1, 2, 3]
# The clients' sessions only: an autovacuum worker in the database is the superuser's,
# and terminating it is refused (must be a superuser to terminate superuser process).
END_SESSIONS = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend'"
)


def test_tops_are_each_partitions_last_marker_and_a_lost_connection_is_replaced(
    relay_env: RelayTestEnv,
) -> None:
    with opened(Secret(relay_env.database_url), pool_size=2) as database:
        tops = CommittedTops(database)
        try:
            assert tops(PARTITIONS) == dict.fromkeys(PARTITIONS, 0)
            write_events(relay_env.database_url, "orders", 40)
            draw(relay_env.database_url)
            markers = relay_env.sql(
                "SELECT partition, max(last_seq) FROM outbox_commits GROUP BY partition"
            )
            expected = {p: 0 for p in PARTITIONS} | {int(p): int(t) for p, t in markers}
            assert sum(1 for top in expected.values() if top > 0) >= 2, expected
            assert tops(PARTITIONS) == expected

            # The server ends the watch's session (a restart, a failover, an idle timeout).
            relay_env.sql(END_SESSIONS)
            with pytest.raises(RetriableError, match=r"watching the outbox on .* failed"):
                tops(PARTITIONS)
            assert tops(PARTITIONS) == expected
        finally:
            tops.close()


def test_a_fetch_reads_the_rows_in_order_and_a_lost_connection_is_replaced(
    relay_env: RelayTestEnv,
) -> None:
    ids = write_events(relay_env.database_url, "orders", 40)
    with opened(Secret(relay_env.database_url), pool_size=1, pre_ping=False) as database:
        source = PostgresOutboxSource(database)
        fetched = [source.fetch(p, 0, 100) for p in PARTITIONS]
        assert {r.id for records in fetched for r in records} == ids
        for partition, records in zip(PARTITIONS, fetched, strict=True):
            assert [r.seq for r in records] == sorted(r.seq for r in records)
            assert {r.partition for r in records} <= {partition}
        # Within a partition, what comes after a position is the rest, in order.
        first = next(records for records in fetched if len(records) > 2)
        after = source.fetch(first[0].partition, first[1].seq, 100)
        assert [r.id for r in after] == [r.id for r in first[2:]]

        relay_env.sql(END_SESSIONS)  # the pool's one connection is gone
        with pytest.raises(RetriableError, match="reading the outbox"):
            source.fetch(first[0].partition, 0, 100)
        assert source.fetch(first[0].partition, 0, 100) == first
