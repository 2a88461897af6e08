"""I2 with commit markers (0007_commit_markers): per-key commit order, a gap-free horizon
while a writer holds its partition, writers of other keys not held up, and a live outbox
upgraded from row-by-row sequencing published exactly once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay
from relay.postgres import migrations
from relay.postgres.engine import Database
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.runtime.secrets import Secret
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    new_prefix,
    read_committed,
    run_relay,
    run_sql,
    wait_until,
)
from tests.partitioning import partition_of

PARTITIONS = 4


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _keys_in(partition: int, count: int) -> list[str]:
    found = (f"key-{n}" for n in range(10_000))
    return [k for k in found if partition_of(k.encode(), PARTITIONS) == partition][:count]


@contextmanager
def _sequenced_and_open(url: str, key: str) -> Iterator[psycopg.Connection]:
    """A transaction that wrote one event for ``key``, was sequenced early (SET CONSTRAINTS
    ALL IMMEDIATE) and stays open, holding its partition and key, until the block ends."""
    with psycopg.connect(_libpq(url)) as conn:
        conn.execute(
            "INSERT INTO outbox (topic, key, value) VALUES ('t', %s, %s)",
            (key.encode(), b"held"),
        )
        conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
        yield conn


def _write(url: str, key: str, value: bytes) -> int:
    (row,) = run_sql(
        url,
        "INSERT INTO outbox (topic, key, value) VALUES ('t', :k, :v) RETURNING id",
        k=key.encode(),
        v=value,
    )
    return int(row[0])  # type: ignore[call-overload]


def _position_of(url: str, outbox_id: int) -> int:
    (row,) = run_sql(url, "SELECT position FROM outbox_positions WHERE id = :i", i=outbox_id)
    return int(row[0])  # type: ignore[call-overload]


def _lock_waiters(url: str) -> int:
    (row,) = run_sql(url, "SELECT count(*) FROM pg_locks WHERE NOT granted")
    return int(row[0])  # type: ignore[call-overload]


@pytest.fixture
def outbox_url(relay_env: RelayTestEnv) -> str:
    return relay_env.database_url


def test_a_key_is_sequenced_in_commit_order_and_other_keys_do_not_wait(outbox_url: str) -> None:
    same, other = _keys_in(0, 2)
    done: dict[str, int] = {}

    def write_same_key() -> None:
        done["same"] = _write(outbox_url, same, b"second")

    with _sequenced_and_open(outbox_url, same) as held:
        (held_id,) = held.execute("SELECT max(id) FROM outbox").fetchone() or (0,)
        # Another key of the same relay partition commits at once, with a higher position.
        done["other"] = _write(outbox_url, other, b"other")
        second = threading.Thread(target=write_same_key, daemon=True)
        second.start()
        wait_until(lambda: _lock_waiters(outbox_url) > 0, 30, "the same key to wait")
        assert "same" not in done  # the same key waits for the first commit
        held.commit()
    second.join(30)
    assert _position_of(outbox_url, held_id) < _position_of(outbox_url, done["same"])
    assert _position_of(outbox_url, held_id) < _position_of(outbox_url, done["other"])


def test_the_horizon_stops_below_a_transaction_in_flight(
    outbox_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, later = _keys_in(1, 2)
    engine = sa.create_engine(outbox_url, poolclass=NullPool)
    source = PostgresOutboxSource(Database(engine, Secret(outbox_url)), held_up_warning_s=0)
    try:
        early = _write(outbox_url, later, b"early")
        assert [r.id for r in source.fetch(1, 0, 100)] == [early]
        with _sequenced_and_open(outbox_url, first) as held:
            (held_id,) = held.execute("SELECT max(id) FROM outbox").fetchone() or (0,)
            late = _write(outbox_url, later, b"late")  # committed, above the held position
            assert _position_of(outbox_url, late) > _position_of(outbox_url, early)
            with caplog.at_level(logging.WARNING):
                seen = [r.id for r in source.fetch(1, 0, 100)]
            assert seen == [early], "published past a transaction still in flight"
            assert source.high_water(1) == _position_of(outbox_url, early)
            assert "held up" in caplog.text and "backend" in caplog.text
            held.commit()
        assert [r.id for r in source.fetch(1, 0, 100)] == [early, held_id, late]
    finally:
        engine.dispose()


def test_rows_written_before_the_upgrade_are_published_once_after_it(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    url = Secret(database_url)
    migrations.upgrade(url, "0006_sequence_check_by_key")
    run_sql(database_url, "UPDATE outbox_settings SET partitions = :n", n=PARTITIONS)
    engine = sa.create_engine(database_url, poolclass=NullPool)
    env = RelayTestEnv(database_url, bootstrap_servers, new_prefix())
    topic = make_topic(partitions=3)

    def write(first: int, transactions: int) -> None:
        for n in range(first, first + transactions):
            with engine.begin() as conn:  # 1 to 3 events per transaction, keys shared
                relay.publish_many(
                    conn,
                    [relay.Event(topic, f"k{(n + i) % 5}", {"n": n}) for i in range(n % 3 + 1)],
                )

    try:
        write(0, 12)
        migrations.upgrade(url)
        write(12, 12)
    finally:
        engine.dispose()
    ids = {int(r[0]) for r in run_sql(database_url, "SELECT id FROM outbox")}  # type: ignore[call-overload]
    legacy = run_sql(database_url, "SELECT count(*) FROM outbox WHERE seq IS NOT NULL")
    assert legacy[0][0] and legacy[0][0] < len(ids)  # both kinds of rows are waiting

    result = run_relay(env, "run", "--once", "--batch-size", "7")
    assert result.returncode == 0, result.stderr
    assert_exactly_once_in_order(read_committed(bootstrap_servers, topic), ids)
    assert run_sql(database_url, "SELECT count(*) FROM outbox") == [(0,)]


def test_serializable_writers_of_events_do_not_conflict(outbox_url: str) -> None:
    """Sequencing a transaction whose events share one key reads no row another writer
    wrote, so two SERIALIZABLE writers of events (reading and writing nothing else in
    common) both commit, their inserts interleaved."""
    first, second = (psycopg.connect(_libpq(outbox_url)) for _ in range(2))
    try:
        for conn in (first, second):
            conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        for _ in range(3):
            for n, conn in enumerate((first, second)):
                conn.execute(
                    "INSERT INTO outbox (topic, key, value) VALUES ('t', %s, NULL)",
                    (f"writer-{n}".encode(),),
                )
        first.commit()
        second.commit()  # SQLSTATE 40001 here when sequencing conflicts
    finally:
        first.close()
        second.close()
    assert run_sql(outbox_url, "SELECT count(*) FROM outbox_positions") == [(6,)]
