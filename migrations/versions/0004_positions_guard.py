"""Positions that cannot go back or come from another database; headers that are an array.

Revision ID: 0004_positions_guard
Revises: 0003_mirror
Create Date: 2026-11-23

``outbox_identity`` holds one row: this database's id, created here, and the default
transactional-id prefix of its relays. The id travels in the metadata of every position
the relay commits to Kafka, so a position committed for another database (a staging clone
on the same cluster and group) is refused instead of used (I3). A database that already
assigned sequence numbers keeps the old default prefix ``outbox-relay`` (its positions
group is ``outbox-relay-positions``), so that an upgrade finds its positions where they
are; a new database gets a prefix of its own, ``outbox-relay-<first 8 hex digits>``.

``outbox_published_floor`` keeps, per relay partition, the highest position the relay
committed to Kafka and then recorded here (after the Kafka commit, with the clean-up of
the published rows). Kafka's position may never be below it: a lower one means the
positions group's offsets expired or were deleted, and the relay refuses to start rather
than publish the partition again.

``outbox_headers_array``: the headers column must be a JSON array (checked for new rows
only; older rows that are not become dead letters when the relay reads them).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004_positions_guard"
down_revision: str | None = "0003_mirror"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "outbox_identity",
        sa.Column("singleton", sa.Boolean, primary_key=True, server_default=sa.true()),
        sa.Column(
            "database_id",
            postgresql.UUID(as_uuid=False),
            nullable=False,
            server_default=sa.text("gen_random_uuid()"),
        ),
        sa.Column("default_prefix", sa.Text, nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.CheckConstraint("singleton", name="outbox_identity_one_row"),
    )
    op.execute(
        """
        INSERT INTO outbox_identity (database_id, default_prefix)
        SELECT id, CASE WHEN (SELECT is_called FROM outbox_seq) THEN 'outbox-relay'
                        ELSE 'outbox-relay-' || left(replace(id::text, '-', ''), 8) END
        FROM (SELECT gen_random_uuid() AS id) AS new_id
        """
    )
    op.create_table(
        "outbox_published_floor",
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.execute(
        "ALTER TABLE outbox ADD CONSTRAINT outbox_headers_array "
        "CHECK (jsonb_typeof(headers) = 'array') NOT VALID"
    )
    op.execute(
        """
        DO $$
        BEGIN
          IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_relay') THEN
            GRANT SELECT ON outbox_identity TO outbox_relay;
            GRANT SELECT, INSERT, UPDATE ON outbox_published_floor TO outbox_relay;
          END IF;
        END
        $$
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE outbox DROP CONSTRAINT outbox_headers_array")
    op.drop_table("outbox_published_floor")
    op.drop_table("outbox_identity")
