"""I3: kill -9 of the relay process at each dangerous point, then a rerun: every
committed row exactly once, in seq order per relay partition."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from relay.devenv.waiting import wait_until
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    read_committed,
    run_relay,
)
from tests.integration.writes import write_events


@pytest.mark.parametrize(
    "failpoint",
    [
        "startup",  # fenced and position read, nothing published yet
        "after_produce",  # records inside an open Kafka transaction
        "after_commit",  # Kafka committed, outbox rows not yet cleaned up
    ],
)
def test_kill_9_then_rerun_publishes_each_row_exactly_once(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path, failpoint: str
) -> None:
    committed = write_events(relay_env.database_url, topic, 1200)
    # The process dies the first time relay partition 1 reaches the failpoint.
    marker = tmp_path / "fired"
    first = run_relay(
        relay_env,
        "run",
        "--once",
        "--batch-size",
        "100",
        RELAY_FAILPOINTS=f"{failpoint}=kill,partition=1,once={marker}",
    )
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert marker.exists()
    left = relay_env.sql("SELECT count(*) FROM outbox")[0][0]
    assert left > 0  # the crash left work to do

    second = run_relay(relay_env, "run", "--once", "--batch-size", "100")
    assert second.returncode == 0, second.stderr

    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]


def test_kill_9_after_commit_leaves_rows_that_are_not_published_again(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """The rows of the committed batch are still in the table after the crash; the rerun
    must trust Kafka's position over the table, and only clean them up.

    The first run relays partition 0 alone: a process killed with other partitions'
    transactions open would hold the topic's readers back until the broker times those
    out, and the committed batch could not be told apart before the rerun."""
    committed = write_events(relay_env.database_url, topic, 300)
    first = run_relay(
        relay_env,
        "run",
        "--once",
        "--partitions",
        "0",
        "--batch-size",
        "1000",
        RELAY_FAILPOINTS=f"after_commit=kill,once={tmp_path / 'fired'}",
    )
    assert first.returncode == -signal.SIGKILL, first.stderr
    # The commit returned before the kill, but its markers (which move the last stable
    # offset past the transaction) are written by the brokers after that.
    wait_until(
        lambda: len(read_committed(relay_env.bootstrap_servers, topic)) > 0,
        60,
        "the transaction committed before the kill to be readable",
    )
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(len(committed),)]

    second = run_relay(relay_env, "run", "--once")
    assert second.returncode == 0, second.stderr
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]
