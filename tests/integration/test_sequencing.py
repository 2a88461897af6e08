"""I2: gap-free, commit-ordered sequence numbers, with commits forced out of start order."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import psycopg
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
    draw,
    read_committed,
    run_relay,
    run_sql,
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


def test_concurrent_draws_and_commits_claim_no_common_position(
    relay_env: RelayTestEnv, engine: sa.Engine, topic: str
) -> None:
    """Each marker's positions are its own, and every committed row gets exactly one:
    writers of one row, three rows of one key and three keys commit while three drawers
    (as the partitions and the commit watch of several relays) draw at the same time."""
    errors: list[BaseException] = []
    writing = threading.Event()
    writing.set()

    def write(index: int) -> None:
        kind = index % 3  # 0: one row; 1: three rows of one key; 2: three keys
        try:
            for n in range(100):
                with Session(engine) as session, session.begin():
                    for k in range(1 if kind == 0 else 3):
                        key = f"w{index}-{n}" if kind == 1 else f"w{index}-{n}-{k}"
                        relay.publish(session, topic, key, {"n": n})
        except BaseException as exc:
            errors.append(exc)

    def keep_drawing() -> None:
        try:
            while writing.is_set():
                draw(relay_env.database_url)
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    drawers = [threading.Thread(target=keep_drawing) for _ in range(3)]
    for thread in writers + drawers:
        thread.start()
    for writer in writers:
        writer.join(300)
    writing.clear()
    for drawer in drawers:
        drawer.join(60)
    assert not errors, errors[0]
    draw(relay_env.database_url)
    with engine.connect() as conn:
        overlapping = conn.execute(
            sa.text(
                """
                SELECT count(*) FROM outbox_commits a JOIN outbox_commits b
                  ON a.partition = b.partition AND (a.txid, a.last_seq) <> (b.txid, b.last_seq)
                 AND a.first_seq <= b.last_seq AND b.first_seq <= a.last_seq
                """
            )
        ).scalar_one()
        placed = conn.execute(
            sa.text(
                "SELECT count(*), count(DISTINCT id), count(DISTINCT position) "
                "FROM outbox_positions"
            )
        ).one()
        rows = conn.execute(sa.text("SELECT count(*) FROM outbox")).scalar_one()
    assert overlapping == 0, f"{overlapping} pairs of markers claim the same positions"
    assert tuple(placed) == (rows, rows, rows), "a row without a position, or with two"


def test_a_key_is_in_commit_order_when_the_later_commit_has_the_smaller_transaction_id(
    relay_env: RelayTestEnv,
) -> None:
    """Two transactions of one key commit between two draws: the one that began first
    (and took the smaller transaction id) commits second, as when it waited for a row
    lock the other held. Its event comes second: draws order by commit time, not by
    transaction id."""
    libpq = relay_env.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq) as early, psycopg.connect(libpq) as late:
        early.execute("INSERT INTO outbox (topic, key, value) VALUES ('t', 'other', 'x')")
        late.execute("INSERT INTO outbox (topic, key, value) VALUES ('t', 'k', 'first')")
        (early_txid,) = early.execute("SELECT pg_current_xact_id()::text::bigint").fetchone() or (
            0,
        )
        (late_txid,) = late.execute("SELECT pg_current_xact_id()::text::bigint").fetchone() or (0,)
        assert early_txid < late_txid
        late.commit()
        early.execute("INSERT INTO outbox (topic, key, value) VALUES ('t', 'k', 'second')")
        early.commit()
    draw(relay_env.database_url)
    in_order = run_sql(
        relay_env.database_url,
        "SELECT o.value FROM outbox_positions p JOIN outbox o ON o.id = p.id "
        "WHERE o.key = 'k' ORDER BY p.position",
    )
    assert [bytes(v) for (v,) in in_order] == [b"first", b"second"]  # type: ignore[call-overload]


def test_a_transaction_left_open_across_draws_is_drawn_when_it_commits(
    relay_env: RelayTestEnv,
) -> None:
    """The draws read rows above a cursor, which moves past the ids issued before a check
    only once every transaction that held the outbox then has ended: a transaction that
    inserted a row (a low id) and stays open while others commit and many draws pass is
    drawn when it commits, after them."""
    libpq = relay_env.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq) as held:
        (held_id,) = held.execute(
            "INSERT INTO outbox (topic, key, value) VALUES ('t', 'k', 'held') RETURNING id"
        ).fetchone() or (0,)
        for n in range(5):
            run_sql(
                relay_env.database_url,
                "INSERT INTO outbox (topic, key, value) VALUES ('t', :k, 'later')",
                k=f"k{n}",
            )
            for _ in range(3):
                draw(relay_env.database_url)
        ((drawn,),) = run_sql(relay_env.database_url, "SELECT count(*) FROM outbox_positions")
        assert drawn == 5
        held.commit()
    top = draw(relay_env.database_url)
    assert run_sql(
        relay_env.database_url, "SELECT position FROM outbox_positions WHERE id = :i", i=held_id
    ) == [(top,)]


def test_a_draw_with_no_writer_in_flight_moves_the_cursor_past_every_row_it_read(
    relay_env: RelayTestEnv,
) -> None:
    """A check made before the draw reads its rows, finding no transaction that holds the
    outbox, moves the cursor with that draw: the next draw reads none of a backlog again.
    With one open transaction holding the outbox, the cursor stays below its row."""
    url = relay_env.database_url
    run_sql(
        url,
        "INSERT INTO outbox (topic, key, value) "
        "SELECT 't', convert_to('k' || n, 'UTF8'), 'v' FROM generate_series(1, 50) n",
    )
    draw(url)
    assert run_sql(url, "SELECT cursor = (SELECT max(id) FROM outbox) FROM outbox_draws") == [
        (True,)
    ]
    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq) as held:
        (held_id,) = held.execute(
            "INSERT INTO outbox (topic, key, value) VALUES ('t', 'k', 'held') RETURNING id"
        ).fetchone() or (0,)
        run_sql(url, "UPDATE outbox_draws SET checked_at = NULL")  # a check is due
        draw(url)
        ((cursor, waiting_for),) = run_sql(url, "SELECT cursor, check_vxids FROM outbox_draws")
        assert cursor < held_id and waiting_for
        held.commit()
    draw(url)
    assert run_sql(url, "SELECT cursor, check_vxids FROM outbox_draws") == [(held_id, None)]


def test_each_drawn_row_carries_its_own_transactions_commit_time(
    relay_env: RelayTestEnv,
) -> None:
    """A marker's ``times`` line up with its ``ids`` (what a fetch publishes as the row's
    commit time, CloudEvents ``ce_time``): transactions of one key committed one after
    the other, one draw for all of them."""
    url = relay_env.database_url
    for n in range(4):
        run_sql(
            url,
            "INSERT INTO outbox (topic, key, value) "
            "SELECT 't', 'k', convert_to(:v || '-' || i, 'UTF8') FROM generate_series(1, :rows) i",
            v=f"txn{n}",
            rows=n + 1,
        )
    committed = run_sql(url, "SELECT id, pg_xact_commit_timestamp(xmin) FROM outbox ORDER BY id")
    draw(url)
    drawn = run_sql(
        url,
        "SELECT u.id, u.at FROM outbox_commits m "
        "CROSS JOIN LATERAL unnest(m.ids, m.times) u(id, at) ORDER BY u.id",
    )
    assert drawn == committed
    assert len({at for _, at in committed}) == 4


def test_a_row_that_sets_what_the_draw_decides_is_refused(relay_env: RelayTestEnv) -> None:
    """A row's transaction id, partition, ordinal and seq are the database's and the
    draw's: a row written with any of them (a copy of another row, say) would be drawn
    wrongly or never, so the outbox refuses it."""
    for column, value in (("txid", "'5'"), ("partition", "0"), ("ordinal", "0"), ("seq", "1")):
        with pytest.raises(sa.exc.IntegrityError, match="outbox_written_plainly"):
            run_sql(
                relay_env.database_url,
                f"INSERT INTO outbox (topic, key, {column}) VALUES ('t', 'k', {value})",
            )
    assert run_sql(relay_env.database_url, "SELECT count(*) FROM outbox") == [(0,)]


def test_a_draw_in_a_transaction_that_wrote_outbox_rows_is_refused(
    relay_env: RelayTestEnv,
) -> None:
    """A transaction's own rows are visible to it alone and it has no commit time yet: a
    draw inside it would place them before commits that finish first. Refused; the
    rows are drawn once it commits."""
    libpq = relay_env.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq) as writer:
        writer.execute("INSERT INTO outbox (topic, key, value) VALUES ('t', 'k', 'v')")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="wrote outbox"):
            writer.execute("SELECT outbox_draw()")
        writer.rollback()
        writer.execute("INSERT INTO outbox (topic, key, value) VALUES ('t', 'k', 'w')")
        writer.commit()
    assert draw(relay_env.database_url) == 1
