"""Outbox table, relay partitions and commit-time sequencing.

Revision ID: 0001_outbox
Revises:
Create Date: 2026-11-22

Every outbox row gets its relay partition on insert (from its key) and its ``seq`` at
commit: a deferred constraint trigger takes a transaction-scoped advisory lock on each
partition the transaction wrote to, in partition order, and only then draws ``seq``
values. Writers of one partition therefore receive seq values in commit order, and
PostgreSQL makes a commit visible before it releases the lock, so a reader that sees
``seq = s`` of partition ``p`` already sees every smaller seq of ``p`` (gap-free).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001_outbox"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_PARTITIONS = 8
# First key of the two-key advisory lock; the second is the relay partition.
ADVISORY_LOCK_CLASS = 0x0B0B


def upgrade() -> None:
    op.create_table(
        "outbox_settings",
        sa.Column("singleton", sa.Boolean, primary_key=True, server_default=sa.true()),
        sa.Column("partitions", sa.Integer, nullable=False),
        sa.CheckConstraint("singleton", name="outbox_settings_single_row"),
        sa.CheckConstraint("partitions BETWEEN 1 AND 4096", name="outbox_settings_partitions"),
    )
    op.execute(f"INSERT INTO outbox_settings (partitions) VALUES ({DEFAULT_PARTITIONS})")
    op.execute("CREATE SEQUENCE outbox_seq AS bigint")
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=True),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("key", postgresql.BYTEA, nullable=True),
        sa.Column("value", postgresql.BYTEA, nullable=True),
        sa.Column("event_type", sa.Text, nullable=True),
        sa.Column(
            "headers", postgresql.JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.CheckConstraint(
            "length(topic) BETWEEN 1 AND 249 AND topic ~ '^[A-Za-z0-9._-]+$'",
            name="outbox_topic_valid",
        ),
    )
    op.create_index("outbox_partition_seq", "outbox", ["partition", "seq"], unique=True)
    op.create_index(
        "outbox_unsequenced",
        "outbox",
        ["partition"],
        postgresql_where=sa.text("seq IS NULL"),
    )
    # Partition of a key: the first 28 bits of sha256(key), modulo the partition count.
    # relay.partitioning.partition_of() computes the same in Python.
    op.execute(
        """
        CREATE FUNCTION outbox_partition_of(key bytea, partitions integer) RETURNS integer
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
          SELECT (('x' || substr(encode(sha256(key), 'hex'), 1, 7))::bit(28)::integer) % partitions
        $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION outbox_assign_partition() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
          n integer;
        BEGIN
          SELECT partitions INTO STRICT n FROM outbox_settings;
          IF NEW.key IS NULL THEN
            NEW.partition := NEW.id % n;
          ELSE
            NEW.partition := outbox_partition_of(NEW.key, n);
          END IF;
          NEW.seq := NULL;
          RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER outbox_assign_partition BEFORE INSERT ON outbox
        FOR EACH ROW EXECUTE FUNCTION outbox_assign_partition()
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION outbox_sequence_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
          p integer;
        BEGIN
          -- The first firing in a transaction sequences all of its rows; later ones find
          -- their row done. Only this transaction's own unsequenced rows are visible here:
          -- committed rows always carry a seq.
          PERFORM 1 FROM outbox WHERE id = NEW.id AND seq IS NULL;
          IF NOT FOUND THEN
            RETURN NULL;
          END IF;
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
    )
    op.execute(
        """
        CREATE CONSTRAINT TRIGGER outbox_sequence_at_commit AFTER INSERT ON outbox
        DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION outbox_sequence_at_commit()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS outbox_sequence_at_commit ON outbox")
    op.execute("DROP TRIGGER IF EXISTS outbox_assign_partition ON outbox")
    op.drop_table("outbox")
    op.execute("DROP FUNCTION IF EXISTS outbox_sequence_at_commit()")
    op.execute("DROP FUNCTION IF EXISTS outbox_assign_partition()")
    op.execute("DROP FUNCTION IF EXISTS outbox_partition_of(bytea, integer)")
    op.execute("DROP SEQUENCE IF EXISTS outbox_seq")
    op.drop_table("outbox_settings")
