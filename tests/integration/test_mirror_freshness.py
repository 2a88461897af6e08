"""Freshness of mirrored tables (docs/mirror.md, "Freshness"): `relay run` sends heartbeats
through a topic, `relay mirror` stores them with its offsets, and `relay_mirror_freshness`
says up to when each table is complete. On a quiet topic it passes a time taken after the
last write; it never passes the commit of an event not yet applied (a transaction held
open, a relay stopped); a kill -9 or a replay keeps it exactly once; a table whose topic
carries no heartbeats shows NULL."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay
from relay.runtime.heartbeat import HEARTBEAT_HEADER, Heartbeat, decode_heartbeat
from tests.integration.mirror_support import MirrorEnv, run_script
from tests.integration.replicate_support import ReplicaEnv
from tests.integration.support import (
    RelayTestEnv,
    read_committed,
    run_relay,
    start_relay,
    wait_until,
)

INTERVAL_S = 0.3
DDL = """
CREATE TABLE items (id text PRIMARY KEY, n integer NOT NULL, version bigint NOT NULL);
CREATE TABLE others (id text PRIMARY KEY, n integer NOT NULL, version bigint NOT NULL);
"""


def _mapping(**topics: str) -> str:
    """A mapping of each table (keyword) to its topic."""
    return "".join(
        f"""
[[tables]]
table = "{table}"
topics = ["{topic}"]
key = {{ column = "id" }}
version = {{ column = "version", source = "header:outbox-seq" }}
columns = {{ n = "n" }}
"""
        for table, topic in topics.items()
    )


class Setup:
    def __init__(self, env: RelayTestEnv, beats: str, quiet: str, tmp_path: Path) -> None:
        self.env, self.beats, self.quiet, self.tmp_path = env, beats, quiet, tmp_path
        run_script(env.database_url, DDL)
        (tmp_path / "mirror.toml").write_text(_mapping(items=beats, others=quiet))
        self.mirror = MirrorEnv(
            env.database_url, env.bootstrap_servers, tmp_path / "mirror.toml", "fresh"
        )
        self.engine = sa.create_engine(env.database_url, poolclass=NullPool)
        self.processes: list[subprocess.Popen[str]] = []

    def relay(self, *args: str, name: str = "relay") -> subprocess.Popen[str]:
        process = start_relay(
            self.env,
            "run",
            *args,
            "--heartbeat-topics",
            self.beats,
            "--heartbeat-interval",
            str(INTERVAL_S),
            log=self.tmp_path / f"{name}.log",
        )
        self.processes.append(process)
        return process

    def start_mirror(self) -> subprocess.Popen[str]:
        process = self.mirror.start(self.tmp_path / "mirror.log")
        self.processes.append(process)
        return process

    def write(self, topic: str, key: str, n: int) -> datetime:
        """One event committed; the database's time once the commit returned."""
        with self.engine.begin() as conn:
            relay.publish(conn, topic, key, {"n": n})
        return self.now()

    def now(self) -> datetime:
        with self.engine.connect() as conn:
            return conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()  # type: ignore[no-any-return]

    def through(self, table: str) -> datetime | None:
        found = self.env.sql(
            "SELECT complete_through FROM relay_mirror_freshness "
            "WHERE consumer_group = 'fresh' AND table_name = :t",
            t=table,
        )
        return None if not found else found[0][0]  # type: ignore[return-value]

    def vouched(self, key: str, committed: datetime) -> bool:
        """Whether the view says items is complete through ``committed``; when it does, the
        event of ``key`` committed then must be applied (one snapshot: one statement)."""
        claimed, applied = self.env.sql(
            "SELECT coalesce((SELECT complete_through >= :c FROM relay_mirror_freshness "
            "WHERE consumer_group = 'fresh' AND table_name = 'items'), false), "
            "EXISTS (SELECT FROM items WHERE id = :k)",
            c=committed,
            k=key,
        )[0]
        assert applied or not claimed, f"complete through {committed} claimed, {key} not applied"
        return bool(claimed)

    def beats_of_others(self, partition: int) -> datetime | None:
        """The oldest complete-through time of the other relay partitions' heartbeats."""
        return self.env.sql(  # type: ignore[return-value]
            "SELECT min(complete_through) FROM mirror_heartbeats WHERE consumer_group = 'fresh' "
            "AND relay_partition <> :p",
            p=partition,
        )[0][0]

    def partition_of(self, key: str) -> int:
        sql = "SELECT outbox_partition_of(convert_to(:k, 'UTF8'), 4)"
        return int(str(self.env.sql(sql, k=key)[0][0]))

    def key_in(self, partition: int) -> str:
        return next(f"k{n}" for n in range(1000) if self.partition_of(f"k{n}") == partition)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        self.engine.dispose()


@pytest.fixture
def setup(
    relay_env: RelayTestEnv, make_topic: Callable[..., str], tmp_path: Path
) -> Iterator[Setup]:
    found = Setup(relay_env, make_topic("beats", partitions=2), make_topic("quiet"), tmp_path)
    try:
        yield found
    finally:
        found.close()


@pytest.mark.long(40)
def test_a_quiet_topic_is_complete_through_a_time_after_its_last_write(setup: Setup) -> None:
    setup.relay()
    setup.start_mirror()
    setup.write(setup.quiet, "q", 1)
    warm = setup.write(setup.beats, "warm", 1)  # measured below: once both are running
    wait_until(lambda: setup.vouched("warm", warm), 60, "the relay and the mirror running")
    committed = setup.write(setup.beats, "a", 1)
    begun = time.monotonic()
    wait_until(lambda: setup.vouched("a", committed), 60, "items complete through the write")
    took = time.monotonic() - begun
    after = setup.now()  # nothing is written from now on: the topic is quiet
    wait_until(lambda: setup.vouched("a", after), 60, "items complete through a later time")
    assert took < 20 * INTERVAL_S + 10, f"{took:.1f} s to pass the last write"
    print(f"complete through the last write after {took:.2f} s")
    assert setup.through("others") is None  # its topic carries no heartbeats

    lag = setup.mirror.run("--lag")
    assert lag.returncode == 0, lag.stderr
    rows = {line.split()[0]: line for line in lag.stdout.splitlines() if line}
    assert "unknown" in rows["others"]
    assert str(setup.through("items"))[:10] in rows["items"]


@contextmanager
def _open_transaction(setup: Setup, key: str) -> Iterator[sa.Connection]:
    with setup.engine.connect() as conn:
        conn.begin()
        relay.publish(conn, setup.beats, key, {"n": 1})
        yield conn


@pytest.mark.long(60)
def test_an_open_transaction_holds_nothing_back_and_is_vouched_for_once_applied(
    setup: Setup,
) -> None:
    """A writer's transaction left open holds no relay partition, its own included: the
    table is vouched for past the time it opened; once it commits, its event is applied
    before the table is vouched for past its commit (``vouched`` checks that at every
    look)."""
    setup.relay()
    setup.start_mirror()
    first = setup.write(setup.beats, "first", 1)
    wait_until(lambda: setup.vouched("first", first), 60, "heartbeats flowing")
    with _open_transaction(setup, "held") as conn:
        opened = setup.now()
        wait_until(
            lambda: (setup.through("items") or opened) > opened,
            60,
            "the table vouched for past the open transaction",
        )
        conn.commit()
    committed = setup.now()
    wait_until(lambda: setup.vouched("held", committed), 60, "held vouched for")


@pytest.mark.long(60)
def test_a_stopped_relay_partition_holds_the_table_back(setup: Setup) -> None:
    held = 2
    setup.relay("--partitions", "0,1,3", name="others")
    lone = setup.relay("--partitions", str(held), name="lone")
    setup.start_mirror()
    first = setup.write(setup.beats, "first", 1)
    wait_until(lambda: setup.vouched("first", first), 60, "heartbeats flowing")
    lone.send_signal(signal.SIGTERM)
    assert lone.wait(30) == 0

    key = setup.key_in(held)
    committed = setup.write(setup.beats, key, 1)
    wait_until(
        lambda: (setup.beats_of_others(held) or committed) > committed,
        60,
        "the running partitions vouch past the write",
    )
    assert not setup.vouched(key, committed)
    through = setup.through("items")
    assert through is not None and through < committed

    setup.relay("--partitions", str(held), name="lone-again")
    wait_until(lambda: setup.vouched(key, committed), 60, f"{key} vouched for")


def _heartbeats_below_offsets(setup: Setup) -> dict[tuple[int, str, int], datetime]:
    """From the topic: the latest heartbeat of each (Kafka partition, database, relay
    partition) below the stored offset, as the mirror must have stored it."""
    offsets = setup.mirror.offsets()
    latest: dict[tuple[int, str, int], int] = {}
    for record in read_committed(setup.env.bootstrap_servers, setup.beats):
        beat = decode_heartbeat(record.value) if HEARTBEAT_HEADER in record.headers else None
        if beat is None or record.offset >= offsets.get((setup.beats, record.partition), 0):
            continue
        slot = (record.partition, beat.database_id, beat.relay_partition)
        latest[slot] = max(latest.get(slot, 0), beat.complete_through_ms)
    return {slot: _at(ms) for slot, ms in latest.items()}


def _at(ms: int) -> datetime:
    return Heartbeat("x", 0, 1, ms).complete_through


def _stored(setup: Setup) -> dict[tuple[int, str, int], datetime]:
    rows = setup.env.sql(
        "SELECT partition, source_database_id, relay_partition, complete_through "
        "FROM mirror_heartbeats WHERE consumer_group = 'fresh' AND topic = :t",
        t=setup.beats,
    )
    return {(int(str(p)), str(d), int(str(r))): t for p, d, r, t in rows}  # type: ignore[misc]


@pytest.mark.long(60)
def test_kill_9_and_replay_keep_the_stored_heartbeats_exactly_once(setup: Setup) -> None:
    for n in range(3):
        setup.write(setup.beats, f"k{n}", n)
        assert (
            run_relay(setup.env, "run", "--once", "--heartbeat-topics", setup.beats).returncode == 0
        )
    marker = setup.tmp_path / "fired"
    killed = setup.mirror.run(
        "--once",
        "--batch-size",
        "1",
        RELAY_FAILPOINTS=f"mirror_after_apply=kill,partition=1,once={marker}",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _stored(setup) == _heartbeats_below_offsets(setup)

    assert setup.mirror.run("--once").returncode == 0
    stored = _stored(setup)
    assert stored == _heartbeats_below_offsets(setup)
    assert len(stored) == 2 * 4  # every Kafka partition, from every relay partition
    assert setup.through("items") == min(stored.values())

    setup.env.sql("UPDATE mirror_offsets SET next_offset = 0 WHERE consumer_group = 'fresh'")
    assert setup.mirror.run("--once").returncode == 0
    assert _stored(setup) == stored  # a replay moves nothing back


@pytest.mark.long(40)
def test_a_mirror_of_a_replica_has_the_same_freshness(
    setup: Setup, target_bootstrap_servers: str
) -> None:
    committed = setup.write(setup.beats, "a", 1)
    published = run_relay(setup.env, "run", "--once", "--heartbeat-topics", setup.beats)
    assert published.returncode == 0, published.stderr
    replica = ReplicaEnv(setup.env.bootstrap_servers, target_bootstrap_servers, "fresh-dr")
    copied = replica.run("--once", "--topics", setup.beats, "--target-prefix", "fr.")
    assert copied.returncode == 0, copied.stderr

    mapping = setup.tmp_path / "replica.toml"
    mapping.write_text(_mapping(items=f"fr.{setup.beats}"))
    mirror = MirrorEnv(setup.env.database_url, target_bootstrap_servers, mapping, "fresh-replica")
    applied = mirror.run("--once")
    assert applied.returncode == 0, applied.stderr
    through = setup.env.sql(
        "SELECT complete_through FROM relay_mirror_freshness "
        "WHERE consumer_group = 'fresh-replica' AND table_name = 'items'"
    )[0][0]
    assert isinstance(through, datetime) and through >= committed
    assert setup.env.sql("SELECT n FROM items WHERE id = 'a'") == [(1,)]


@pytest.mark.long(40)
def test_a_table_filled_again_from_the_start_is_unknown_until_the_replay_passes(
    setup: Setup,
) -> None:
    committed = setup.write(setup.beats, "a", 1)
    assert run_relay(setup.env, "run", "--once", "--heartbeat-topics", setup.beats).returncode == 0
    assert setup.mirror.run("--once").returncode == 0
    assert setup.vouched("a", committed)

    # Filled again from the start: emptied, its topic replayed from offset 0.
    setup.env.sql("DELETE FROM items")
    setup.env.sql(
        "UPDATE mirror_offsets SET next_offset = 0 WHERE consumer_group = 'fresh' AND topic = :t",
        t=setup.beats,
    )
    assert setup.through("items") is None
    assert not setup.vouched("a", committed)
    assert setup.mirror.run("--once", "--batch-size", "1").returncode == 0
    assert setup.vouched("a", committed)


def test_a_missing_heartbeat_topic_stops_the_relay_at_start_up(relay_env: RelayTestEnv) -> None:
    missing = f"missing-beats-{uuid.uuid4().hex[:8]}"
    done = run_relay(relay_env, "run", "--once", "--heartbeat-topics", missing)
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"relay: error: heartbeat topic {missing} (--heartbeat-topics, RELAY_HEARTBEAT_TOPICS) "
        "does not exist in Kafka"
    )
