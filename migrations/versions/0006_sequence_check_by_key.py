"""Commit-time sequencing in linear time for transactions with many outbox rows.

Revision ID: 0006_sequence_check_by_key
Revises: 0005_partition_count_guard
Create Date: 2026-11-23

The deferred trigger fires once per outbox row; the first firing sequences all of the
transaction's rows and the later ones only have to see that their row is done. They
looked it up with ``id = NEW.id AND seq IS NULL``, which the planner answers from the
partial index of unsequenced rows once the table is analysed: each firing then walked
every row version the first one had updated, n firings x n rows (3,000 rows: 10.5 million
index tuples read; 50,000 rows: not committed after 6 minutes). The row is now looked up by
its primary key alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006_sequence_check_by_key"
down_revision: str | None = "0005_partition_count_guard"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADVISORY_LOCK_CLASS = 0x0B0B  # as in 0001_outbox

_DURABLE_COMMIT = """
  -- The relay may publish these rows as soon as they are visible, so their commit
  -- must be durable first: a crash must not lose a commit Kafka already has.
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;"""

_FIND_BY_KEY = """
  SELECT seq INTO done FROM outbox WHERE id = NEW.id;
  IF NOT FOUND OR done IS NOT NULL THEN
    RETURN NULL;
  END IF;"""

_FIND_UNSEQUENCED = """
  PERFORM 1 FROM outbox WHERE id = NEW.id AND seq IS NULL;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;"""


def _sequence_at_commit(find_row: str) -> str:
    return f"""
        CREATE OR REPLACE FUNCTION outbox_sequence_at_commit() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
          p integer;
          done bigint;
        BEGIN
          -- The first firing in a transaction sequences all of its rows; later ones find
          -- their row done. Only this transaction's own unsequenced rows are visible here:
          -- committed rows always carry a seq.{find_row}{_DURABLE_COMMIT}
          FOR p IN SELECT DISTINCT partition FROM outbox WHERE seq IS NULL ORDER BY 1 LOOP
            PERFORM pg_advisory_xact_lock({ADVISORY_LOCK_CLASS}, p);
          END LOOP;
          UPDATE outbox o SET seq = s.seq
          FROM (
            SELECT q.id, nextval('outbox_seq') AS seq
            FROM (SELECT id FROM outbox WHERE seq IS NULL ORDER BY id) q
          ) s
          WHERE o.id = s.id;
          RETURN NULL;
        END
        $$
        """


def _replace(find_row: str) -> None:
    op.execute(_sequence_at_commit(find_row))
    # CREATE OR REPLACE resets the function's security attributes (see 0002_outbox_safety).
    op.execute(
        "ALTER FUNCTION outbox_sequence_at_commit() SECURITY DEFINER SET search_path FROM CURRENT"
    )


def upgrade() -> None:
    _replace(_FIND_BY_KEY)


def downgrade() -> None:
    _replace(_FIND_UNSEQUENCED)
