"""Outbox dead letters, durable outbox commits, triggers with the schema owner's rights.

Revision ID: 0002_outbox_safety
Revises: 0001_outbox
Create Date: 2026-11-22

``outbox_dead_letters`` keeps the rows Kafka refuses for good (e.g. over the size limit),
moved there by the relay with the error, so nothing is lost silently and an operator can
fix and re-publish them.

A transaction that writes outbox rows always commits durably (``synchronous_commit`` is
raised from ``off`` to ``on`` for it): the relay publishes what it sees, and a commit
that a crash could still take back must never reach Kafka.

Both trigger functions run with the rights of the schema owner (SECURITY DEFINER, fixed
search_path), so a service role needs nothing but INSERT on ``outbox``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002_outbox_safety"
down_revision: str | None = "0001_outbox"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# First key of the two-key advisory lock (as in 0001_outbox); the second is the partition.
ADVISORY_LOCK_CLASS = 0x0B0B
TRIGGER_FUNCTIONS = ("outbox_assign_partition()", "outbox_sequence_at_commit()")

_DURABLE_COMMIT = """
  -- The relay may publish these rows as soon as they are visible, so their commit
  -- must be durable first: a crash must not lose a commit Kafka already has.
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;"""


def _sequence_at_commit(durable: bool) -> str:
    """The commit-time sequencing function of 0001_outbox, with or without the step that
    makes the commit durable."""
    return f"""
        CREATE OR REPLACE FUNCTION outbox_sequence_at_commit() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
          p integer;
        BEGIN
          -- The first firing in a transaction sequences all of its rows; later ones find
          -- their row done. Only this transaction's own unsequenced rows are visible here:
          -- committed rows always carry a seq.
          PERFORM 1 FROM outbox WHERE id = NEW.id AND seq IS NULL;
          IF NOT FOUND THEN
            RETURN NULL;
          END IF;{_DURABLE_COMMIT if durable else ""}
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


def upgrade() -> None:
    op.create_table(
        "outbox_dead_letters",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
        sa.Column("outbox_id", sa.BigInteger, nullable=False, unique=True),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("key", postgresql.BYTEA, nullable=True),
        sa.Column("value", postgresql.BYTEA, nullable=True),
        sa.Column("event_type", sa.Text, nullable=True),
        sa.Column("headers", postgresql.JSONB, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column(
            "dead_lettered_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
    )
    # CREATE OR REPLACE resets the function's security attributes, so ALTER comes after.
    op.execute(_sequence_at_commit(durable=True))
    for function in TRIGGER_FUNCTIONS:
        op.execute(f"ALTER FUNCTION {function} SECURITY DEFINER SET search_path FROM CURRENT")


def downgrade() -> None:
    for function in TRIGGER_FUNCTIONS:
        op.execute(f"ALTER FUNCTION {function} SECURITY INVOKER RESET search_path")
    op.execute(_sequence_at_commit(durable=False))
    op.drop_table("outbox_dead_letters")
