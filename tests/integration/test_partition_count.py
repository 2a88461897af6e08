"""The relay partition count changes only when no row would be stranded or reordered (I2).

Lowering the count would leave the rows of the removed partitions unpublished; raising it
moves keys to other partitions, where their next events could overtake the earlier ones.
Both are safe only when every committed row is published.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    read_committed,
    run_relay,
)
from tests.integration.writes import write_events


def test_the_count_cannot_change_while_rows_are_not_published(
    relay_env: RelayTestEnv, topic: str
) -> None:
    write_events(relay_env.database_url, topic, 40)
    with pytest.raises(sa.exc.DBAPIError, match="not published yet"):
        relay_env.sql("UPDATE outbox_settings SET partitions = 2")
    refused = run_relay(relay_env, "db", "partitions", "2")
    assert refused.returncode == 3, refused.stderr
    assert "40 outbox rows are not published yet" in refused.stderr
    assert relay_env.sql("SELECT partitions FROM outbox_settings") == [(RELAY_PARTITIONS,)]


def test_relay_db_partitions_changes_the_count_once_everything_is_published(
    relay_env: RelayTestEnv, topic: str
) -> None:
    first = write_events(relay_env.database_url, topic, 40)
    assert run_relay(relay_env, "run", "--once", "--no-cleanup").returncode == 0

    changed = run_relay(relay_env, "db", "partitions", "8")
    assert changed.returncode == 0, changed.stderr
    assert relay_env.sql("SELECT partitions FROM outbox_settings") == [(8,)]

    later = write_events(relay_env.database_url, topic, 80) - first
    assert {int(r[0]) for r in relay_env.sql("SELECT DISTINCT partition FROM outbox")} - set(  # type: ignore[call-overload]
        range(RELAY_PARTITIONS)
    ), "some keys should now be in the new partitions"
    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr
    assert "relaying partitions [0, 1, 2, 3, 4, 5, 6, 7]" in result.stderr
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), first | later)


def test_rows_stranded_beyond_the_count_stop_the_relay(relay_env: RelayTestEnv, topic: str) -> None:
    write_events(relay_env.database_url, topic, 40)
    relay_env.sql("ALTER TABLE outbox_settings DISABLE TRIGGER USER")  # as an older release
    relay_env.sql("UPDATE outbox_settings SET partitions = 2")

    result = run_relay(relay_env, "run", "--once")

    assert result.returncode == 2, result.stderr
    assert "relay partitions 2 and above, beyond the count of 2" in result.stderr
