"""A transaction with many outbox rows commits in time linear in its rows.

The commit-time trigger fires once per outbox row; only the first firing sequences the
transaction's rows, the later ones must find their row done by its primary key. Through the
partial index of unsequenced rows (which the planner picks once the table is analysed),
each firing walked every row the transaction had updated: n firings x n rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay
from tests.integration.support import RelayTestEnv

ROWS = 3000


def _unsequenced_index_reads(conn: sa.Connection) -> int:
    conn.execute(sa.text("SELECT pg_stat_force_next_flush()"))
    found = conn.execute(
        sa.text(
            "SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes "
            "WHERE indexrelname = 'outbox_unsequenced'"
        )
    )
    return int(found.scalar_one())


def test_the_commit_of_a_large_transaction_reads_each_row_a_bounded_number_of_times(
    relay_env: RelayTestEnv,
) -> None:
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:  # statistics as a busy production table has them
            relay.publish_many(conn, [relay.Event("t", f"k{n}", {"n": n}) for n in range(500)])
        with engine.connect() as conn:
            conn.execute(sa.text("ANALYZE outbox"))
            conn.commit()
            before = _unsequenced_index_reads(conn)
        with engine.begin() as conn:
            relay.publish_many(conn, [relay.Event("t", f"k{n}", {"n": n}) for n in range(ROWS)])
        with engine.connect() as conn:
            read = _unsequenced_index_reads(conn) - before
            sequenced = conn.execute(sa.text("SELECT count(*) FROM outbox WHERE seq IS NOT NULL"))
            assert sequenced.scalar_one() == ROWS + 500
    finally:
        engine.dispose()
    assert read <= 10 * ROWS, f"{read} index tuples read to commit {ROWS} rows"
