"""Large transactions cost time linear in their rows, to commit and to publish.

Once, the commit-time trigger fired per outbox row and each firing walked every row the
transaction had updated (n firings x n rows). Now only the transaction's first row queues
the trigger (0007_commit_markers), which reads the transaction's rows a few times over.
Once, too, each fetch of the relay joined every unpublished marker of its partition with
its rows and kept the first batch: a backlog of large transactions was read whole for
every batch (the backlog's rows x its batches).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay
from relay.postgres.engine import Database
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.publishing.types import OutboxRecord
from relay.runtime.secrets import Secret
from tests.integration.support import RelayTestEnv

ROWS = 3000


def _outbox_rows_read(conn: sa.Connection) -> int:
    """Row versions read from the outbox so far, by index or sequential scans."""
    conn.execute(sa.text("SELECT pg_stat_force_next_flush()"))
    found = conn.execute(
        sa.text(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_user_tables WHERE relname = 'outbox'"
        )
    )
    return int(found.scalar_one())


@pytest.mark.parametrize("analysed_rows", [500, 0], ids=["busy table", "emptied table"])
def test_the_draws_of_a_large_transaction_read_each_row_a_bounded_number_of_times(
    relay_env: RelayTestEnv, analysed_rows: int
) -> None:
    """Statistics as a busy production table has them, or as just after the relay emptied
    it (a plan that fits 0 rows once took minutes over a 50,000-row transaction). Once
    drawn, the rows are behind the draws' cursor: later draws read none of them."""
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            events = [relay.Event("t", f"k{n}", {"n": n}) for n in range(analysed_rows)]
            relay.publish_many(conn, events)
        with engine.connect() as conn:
            conn.execute(sa.text("ANALYZE outbox"))
            conn.commit()
            before = _outbox_rows_read(conn)
        with engine.begin() as conn:
            relay.publish_many(
                conn, [relay.Event("t", f"k{n % 700}", {"n": n}) for n in range(ROWS)]
            )
        with engine.connect() as conn:
            assert _outbox_rows_read(conn) == before  # the commit read no outbox row
            for _ in range(DRAWS):  # as the relay's partitions and commit watch do
                conn.execute(sa.text("SELECT outbox_draw()"))
                conn.commit()
            read = _outbox_rows_read(conn) - before
            sequenced = conn.execute(sa.text("SELECT count(*) FROM outbox_positions"))
            assert sequenced.scalar_one() == ROWS + analysed_rows
    finally:
        engine.dispose()
    assert read <= 3 * (ROWS + analysed_rows), f"{read} outbox rows read in {DRAWS} draws"


BACKLOG_TRANSACTIONS = 12
DRAWS = 20
BATCH = 200


def _fetch_counting_reads(
    engine: sa.Engine, source: PostgresOutboxSource, after: int
) -> tuple[list[OutboxRecord], int]:
    """A fetch of ``BATCH`` rows of relay partition 0 after ``after``, and the outbox rows
    it read."""
    with engine.connect() as conn:
        before = _outbox_rows_read(conn)
    fetched = list(source.fetch(0, after, BATCH))
    with engine.connect() as conn:
        return fetched, _outbox_rows_read(conn) - before


@pytest.mark.parametrize("analysed", ["backlog", "empty"])
def test_a_fetch_reads_the_rows_it_returns_not_the_backlog(
    relay_env: RelayTestEnv, analysed: str
) -> None:
    """A backlog of large transactions over every relay partition; a fetch of ``BATCH``
    rows of one partition, from the start and from inside a transaction, reads at most
    the transactions it returns rows of, whatever the statistics say."""
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    try:
        if analysed == "empty":
            with engine.connect() as conn:
                conn.execute(sa.text("ANALYZE outbox; ANALYZE outbox_commits"))
                conn.commit()
        for t in range(BACKLOG_TRANSACTIONS):
            with engine.begin() as conn:
                relay.publish_many(
                    conn, [relay.Event("t", f"k{n}", {"t": t, "n": n}) for n in range(ROWS)]
                )
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT outbox_draw()"))  # as the relay draws before it reads
            conn.commit()
            if analysed == "backlog":
                conn.execute(sa.text("ANALYZE outbox; ANALYZE outbox_commits"))
                conn.commit()
            expected = [
                (int(row.id), int(row.position))
                for row in conn.execute(
                    sa.text(
                        "SELECT id, position FROM outbox_positions WHERE partition = 0 "
                        "ORDER BY position"
                    )
                )
            ]
            first_id = int(conn.execute(sa.text("SELECT min(id) FROM outbox")).scalar_one())
        source = PostgresOutboxSource(Database(engine, Secret(relay_env.database_url)))
        source.fetch(0, 0, 1)  # learns that no row predates the commit markers
        for after in (0, expected[BATCH][1]):
            fetched, read = _fetch_counting_reads(engine, source, after)
            assert [(r.id, r.seq) for r in fetched] == [
                pair for pair in expected if pair[1] > after
            ][:BATCH]
            assert read <= 2 * ROWS, f"{read} outbox rows read to fetch {BATCH} rows"
        # Going on from the end of the batch before, a fetch starts after that row's id
        # rather than reading the transaction's rows before it again.
        after, after_id = fetched[-1].seq, fetched[-1].id
        # The transactions were written one after another: ROWS consecutive ids each.
        rest_of_transaction = ROWS - 1 - (after_id - first_id) % ROWS
        fetched, read = _fetch_counting_reads(engine, source, after)
        assert [(r.id, r.seq) for r in fetched] == [p for p in expected if p[1] > after][:BATCH]
        assert read <= rest_of_transaction, f"{read} outbox rows read to fetch {BATCH} rows"
        # The clean-up in the middle of a transaction deletes exactly the published rows.
        published = fetched[-1].seq
        deleted = source.record_published(0, published, delete_rows=True)
        assert deleted == sum(1 for _, position in expected if position <= published)
        with engine.connect() as conn:
            left = conn.execute(
                sa.text(
                    "SELECT id, position FROM outbox_positions WHERE partition = 0 "
                    "ORDER BY position"
                )
            )
            assert [(int(r.id), int(r.position)) for r in left] == [
                p for p in expected if p[1] > published
            ]
    finally:
        engine.dispose()
