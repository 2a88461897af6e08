"""I2: gap-free, commit-ordered sequence numbers, with commits forced out of start order."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.postgres.engine import Database
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.runtime.secrets import Secret
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    read_committed,
    run_relay,
    start_relay,
    wait_until,
)

WRITERS = 10
SHARED_KEYS = ("k0", "k1", "k2")


class Writer(threading.Thread):
    """Opens a transaction, writes its events, then commits (or rolls back) on command."""

    def __init__(self, engine: sa.Engine, topic: str, index: int, rollback: bool) -> None:
        super().__init__(daemon=True)
        self.engine, self.topic, self.index, self.rollback = engine, topic, index, rollback
        self.inserted = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Session(self.engine) as session:
                session.begin()
                for key in (*SHARED_KEYS, f"own-{self.index}"):
                    relay.publish(session, self.topic, key, {"writer": self.index, "key": key})
                session.flush()
                self.inserted.set()
                self.release.wait(60)
                if self.rollback:
                    session.rollback()
                else:
                    session.commit()
        except BaseException as exc:
            self.error = exc
            self.inserted.set()
        finally:
            self.done.set()


class PollingReader:
    """Reads like the relay does: per relay partition, rows with seq > last seen."""

    def __init__(self, env: RelayTestEnv, engine: sa.Engine) -> None:
        self.source = PostgresOutboxSource(Database(engine, Secret(env.database_url)))
        self.position: dict[int, int] = defaultdict(int)
        self.seen: list[int] = []

    def poll(self) -> None:
        for p in range(4):
            for row in self.source.fetch(p, self.position[p], 10_000):
                self.seen.append(row.id)
                self.position[p] = row.seq


@pytest.fixture
def engine(relay_env: RelayTestEnv) -> Iterator[sa.Engine]:
    engine = sa.create_engine(relay_env.database_url, pool_size=WRITERS + 2)
    yield engine
    engine.dispose()


def test_late_committers_are_never_skipped_and_keys_keep_commit_order(
    relay_env: RelayTestEnv, topic: str, engine: sa.Engine
) -> None:
    rng = random.Random(7)
    rolled_back = {3, 6}
    writers = [Writer(engine, topic, i, rollback=i in rolled_back) for i in range(WRITERS)]
    for writer in writers:  # start in index order: ids are taken in this order
        writer.start()
        assert writer.inserted.wait(30)
        assert writer.error is None, writer.error
    # Commit in a shuffled order, the first starter last: a poller that trusted
    # insert order would already have moved past its rows.
    commit_order = [w.index for w in writers[1:]]
    rng.shuffle(commit_order)
    commit_order.append(0)

    reader = PollingReader(relay_env, engine)
    reader.poll()
    assert reader.seen == []  # nothing is visible before its commit
    for index in commit_order:
        writers[index].release.set()
        assert writers[index].done.wait(30)
        assert writers[index].error is None, writers[index].error
        reader.poll()

    committed_ids = {int(r[0]) for r in relay_env.sql("SELECT id FROM outbox")}
    committed_writers = [i for i in commit_order if i not in rolled_back]
    assert len(committed_ids) == len(committed_writers) * (len(SHARED_KEYS) + 1)
    assert sorted(reader.seen) == sorted(committed_ids), "the polling reader skipped rows"

    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr
    consumed = read_committed(relay_env.bootstrap_servers, topic)
    assert_exactly_once_in_order(consumed, committed_ids)

    per_key: dict[bytes, list[int]] = defaultdict(list)
    for record in consumed:  # one key lives in one Kafka partition, in offset order
        assert record.value is not None
        per_key[record.key or b""].append(int(record.value.split(b'"writer":')[1].split(b",")[0]))
    for key in SHARED_KEYS:
        assert per_key[key.encode()] == committed_writers, f"{key} not in commit order"


def test_concurrent_free_running_writers_with_a_live_relay(
    relay_env: RelayTestEnv, topic: str, engine: sa.Engine, tmp_path: Path
) -> None:
    """8 writers commit as fast as they can while `relay run` publishes continuously."""
    log = tmp_path / "relay.log"
    relay_process = start_relay(relay_env, "run", "--batch-size", "50", "--no-cleanup", log=log)
    errors: list[BaseException] = []

    def write(index: int) -> None:
        rng = random.Random(index)
        try:
            for n in range(40):
                with Session(engine) as session:
                    session.begin()
                    for _ in range(rng.randint(1, 4)):
                        relay.publish(session, topic, f"key-{rng.randint(0, 20)}", {"w": index})
                    if n % 9 == 8:
                        session.rollback()
                    else:
                        session.commit()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        committed_ids = {int(r[0]) for r in relay_env.sql("SELECT id FROM outbox")}
        wait_until(
            lambda: len(read_committed(relay_env.bootstrap_servers, topic)) >= len(committed_ids),
            60,
            "the live relay to publish every committed row",
        )
    finally:
        relay_process.terminate()
        relay_process.wait(60)
    assert relay_process.returncode == 0, log.read_text()
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed_ids)


def test_concurrent_commits_of_one_partition_draw_positions_no_other_commit_has(
    relay_env: RelayTestEnv, engine: sa.Engine, topic: str
) -> None:
    """Each commit's span of positions is its own: writers of different keys in one relay
    partition commit at the same time (they hold its lock shared), and their draws from
    ``outbox_seq`` must not interleave, or two markers claim the same positions (a row
    published twice, or one skipped). The writers' transactions hold one row (one draw,
    0016), three rows of one key (one partition) or three keys (several partitions)."""
    errors: list[BaseException] = []

    def write(index: int) -> None:
        kind = index % 3  # 0: one row; 1: three rows of one key; 2: three keys
        try:
            for n in range(150):
                with Session(engine) as session, session.begin():
                    for k in range(1 if kind == 0 else 3):
                        key = f"w{index}-{n}" if kind == 1 else f"w{index}-{n}-{k}"
                        relay.publish(session, topic, key, {"n": n})
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(300)
    assert not errors, errors[0]
    with engine.connect() as conn:
        overlapping = conn.execute(
            sa.text(
                """
                SELECT count(*) FROM outbox_commits a JOIN outbox_commits b
                  ON a.partition = b.partition AND a.txid <> b.txid
                 AND a.first_seq <= b.last_seq AND b.first_seq <= a.last_seq
                """
            )
        ).scalar_one()
    assert overlapping == 0, f"{overlapping} pairs of commits claim the same positions"


DRAW_LOCK = (0x0B0D, 0)  # the draw lock of 0015_contiguous_draws (class, key)


def _draw_waits(engine: sa.Engine) -> bool:
    """Whether a commit waits for the draw lock."""
    with engine.connect() as conn:
        return bool(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND classid = :c AND objid = :k AND objsubid = 2 AND NOT granted"
                ),
                {"c": DRAW_LOCK[0], "k": DRAW_LOCK[1]},
            ).scalar_one()
        )


@pytest.mark.parametrize(
    ("held", "rows", "waits"),
    [
        ("", 1, True),  # a several-row draw in progress: a one-row commit waits for it
        ("_shared", 1, False),  # one-row draws: they do not wait for each other (0016)
        ("_shared", 3, True),  # a one-row draw in progress: a several-row commit waits
    ],
)
def test_a_draw_stays_out_of_several_row_draws_and_one_row_draws_do_not_queue(
    engine: sa.Engine, topic: str, held: str, rows: int, waits: bool
) -> None:
    """The draw lock as the commits' triggers take it: a commit of one row draws one
    ``outbox_seq`` value (SHARED), a commit of several rows a block (EXCLUSIVE), so no
    value is drawn inside another commit's block. Here the test holds the lock as a
    draw in progress would."""
    committed = threading.Event()
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            with Session(engine) as session, session.begin():
                for k in range(rows):
                    relay.publish(session, topic, "one-key", {"k": k})
            committed.set()
        except BaseException as exc:
            errors.append(exc)
            committed.set()

    with engine.connect() as holder:
        holder.execute(sa.text(f"SELECT pg_advisory_lock{held}({DRAW_LOCK[0]}, {DRAW_LOCK[1]})"))
        writer = threading.Thread(target=commit, daemon=True)
        writer.start()
        try:
            if waits:
                wait_until(lambda: _draw_waits(engine), 30, "the commit to wait for the draw lock")
                assert not committed.is_set()
            else:
                assert committed.wait(30), "the one-row commit waited for another's draw"
        finally:
            holder.execute(
                sa.text(f"SELECT pg_advisory_unlock{held}({DRAW_LOCK[0]}, {DRAW_LOCK[1]})")
            )
            holder.commit()
        writer.join(30)
    assert not errors, errors[0]
    assert committed.is_set()
