"""The commit watch's query (relay.postgres.outbox_partitions.CommittedTops): each relay
partition's highest committed marker, on a connection it keeps; a connection the server
ended is a retriable error, and the next call connects again."""

from __future__ import annotations

import pytest

from relay.errors import RetriableError
from relay.postgres.engine import opened
from relay.postgres.outbox_partitions import CommittedTops
from relay.runtime.secrets import Secret
from tests.integration.support import RelayTestEnv
from tests.integration.writes import write_events

pytestmark = pytest.mark.integration

PARTITIONS = [0, 1, 2, 3]


def test_tops_are_each_partitions_last_marker_and_a_lost_connection_is_replaced(
    relay_env: RelayTestEnv,
) -> None:
    with opened(Secret(relay_env.database_url), pool_size=2) as database:
        tops = CommittedTops(database)
        try:
            assert tops(PARTITIONS) == dict.fromkeys(PARTITIONS, 0)
            write_events(relay_env.database_url, "orders", 40)
            markers = relay_env.sql(
                "SELECT partition, max(last_seq) FROM outbox_commits GROUP BY partition"
            )
            expected = {p: 0 for p in PARTITIONS} | {int(p): int(t) for p, t in markers}
            assert sum(1 for top in expected.values() if top > 0) >= 2, expected
            assert tops(PARTITIONS) == expected

            # The server ends the watch's session (a restart, a failover, an idle timeout).
            relay_env.sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            with pytest.raises(RetriableError, match=r"watching the outbox on .* failed"):
                tops(PARTITIONS)
            assert tops(PARTITIONS) == expected
        finally:
            tops.close()
