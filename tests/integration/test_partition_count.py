"""The relay partition count changes only when no row would be stranded or reordered (I2).

Lowering the count would leave the rows of the removed partitions unpublished: refused
while rows wait. Raising it moves keys to other partitions, where their next events could
overtake the earlier ones: on a live outbox the change records a barrier, and no
partition is settled above it before every row up to it is published
(0009_live_partition_count).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.support import (
    Consumed,
    RelayTestEnv,
    assert_exactly_once_in_order,
    draw,
    read_committed,
    run_relay,
    start_relay,
    wait_until,
)
from tests.integration.writes import write_events


def test_the_count_cannot_be_lowered_while_rows_are_not_published(
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
    draw(relay_env.database_url)
    assert {
        int(r[0])  # type: ignore[call-overload]
        for r in relay_env.sql("SELECT DISTINCT partition FROM outbox_positions")
    } - set(range(RELAY_PARTITIONS)), "some keys should now be in the new partitions"
    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr
    assert "relaying partitions [0, 1, 2, 3, 4, 5, 6, 7]" in result.stderr
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), first | later)


def test_rows_stranded_beyond_the_count_stop_the_relay(relay_env: RelayTestEnv, topic: str) -> None:
    write_events(relay_env.database_url, topic, 40)
    draw(relay_env.database_url)  # rows drawn into partitions 0-3
    relay_env.sql("ALTER TABLE outbox_settings DISABLE TRIGGER USER")  # as an older release
    relay_env.sql("UPDATE outbox_settings SET partitions = 2")

    result = run_relay(relay_env, "run", "--once")

    assert result.returncode == 2, result.stderr
    assert "relay partitions 2 and above, beyond the count of 2" in result.stderr


def _in_key_order(consumed: list[Consumed]) -> dict[bytes | None, list[int]]:
    """Per key, the seqs of its records in the order Kafka holds them."""
    by_key: dict[bytes | None, list[int]] = {}
    for record in sorted(consumed, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(record.key, []).append(record.seq)
    return by_key


def _assert_each_key_in_commit_order(consumed: list[Consumed], moved: set[bytes]) -> None:
    by_key = _in_key_order(consumed)
    assert moved <= set(by_key), "every moved key was published"
    out_of_order = {k: s for k, s in by_key.items() if s != sorted(s)}
    assert not out_of_order, f"keys published out of commit order: {out_of_order}"


def _moved_keys(env: RelayTestEnv, count: int) -> set[bytes]:
    draw(env.database_url)
    return {
        bytes(key)  # type: ignore[arg-type]
        for (key,) in env.sql(
            "SELECT DISTINCT key FROM outbox_positions WHERE partition >= :n", n=count
        )
    }


def test_raising_the_count_with_rows_pending_holds_the_new_rows_behind_the_old(
    relay_env: RelayTestEnv, topic: str
) -> None:
    first = write_events(relay_env.database_url, topic, 200)
    changed = run_relay(relay_env, "db", "partitions", "8")
    assert changed.returncode == 0, changed.stderr
    ((barrier,),) = relay_env.sql("SELECT barrier FROM outbox_settings")
    assert barrier == max(int(p) for (p,) in relay_env.sql("SELECT position FROM outbox_positions"))  # type: ignore[call-overload]
    assert f"rows above position {barrier} wait" in changed.stderr

    later = write_events(relay_env.database_url, topic, 200)
    moved = _moved_keys(relay_env, RELAY_PARTITIONS)
    assert moved, "some keys should now be in the new partitions"
    # No partition is settled above the barrier while rows up to it wait; status says why.
    report = run_relay(relay_env, "status", "--output", "json")
    assert report.returncode == 0, report.stderr
    assert f"rows up to position {barrier} of the previous relay partition count" in report.stdout
    horizons = [
        h for (h,) in relay_env.sql("SELECT outbox_horizon(p) FROM generate_series(0, 7) p")
    ]
    assert horizons == [barrier] * 8

    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr
    consumed = read_committed(relay_env.bootstrap_servers, topic)
    assert_exactly_once_in_order(consumed, first | later)
    _assert_each_key_in_commit_order(consumed, moved)
    assert relay_env.sql("SELECT barrier, partitions FROM outbox_settings") == [(None, 8)]


def test_sharing_relays_follow_a_count_raised_while_writers_write(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """`relay run` processes notice the new count within seconds, grow the positions
    topic, share the new partitions, and keep each key's events in commit order."""
    log = tmp_path / "relay.log"
    service = start_relay(relay_env, "run", log=log, RELAY_MEMBER_SESSION_TIMEOUT_MS="6000")
    try:
        wait_until(
            lambda: "taking relay partitions [0, 1, 2, 3]" in log.read_text(),
            60,
            "the relay to take the four partitions",
            explain=log.read_text,
        )
        ids = write_events(relay_env.database_url, topic, 300)
        changed = run_relay(relay_env, "db", "partitions", "8")
        assert changed.returncode == 0, changed.stderr
        ids |= write_events(relay_env.database_url, topic, 300)
        moved = _moved_keys(relay_env, RELAY_PARTITIONS)
        wait_until(
            lambda: relay_env.sql("SELECT count(*) FROM outbox") == [(0,)],
            90,
            "the relay to publish the rows of both counts",
            explain=log.read_text,
        )
        assert "the relay partition count changed from 4 to 8" in log.read_text()
        assert service.poll() is None, log.read_text()
    finally:
        service.terminate()
        service.wait(90)
    consumed = read_committed(relay_env.bootstrap_servers, topic)
    assert_exactly_once_in_order(consumed, ids)
    _assert_each_key_in_commit_order(consumed, moved)
