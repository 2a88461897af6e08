"""Mirror bookkeeping: stored Kafka offsets and dead letters.

Revision ID: 0003_mirror
Revises: 0002_outbox_safety
Create Date: 2026-11-22

``mirror_offsets`` is the only record of how far a mirror consumer group has applied
each Kafka partition: ``next_offset`` is the offset of the next record to apply. It is
advanced with a compare-and-set in the same transaction as the rows it covers.

``mirror_dead_letters`` keeps every record that could not be decoded or mapped, with its
raw bytes and the reason, written in the transaction that moves the offset past it. One
row per record at most (a replay of the same offsets adds nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003_mirror"
down_revision: str | None = "0002_outbox_safety"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mirror_offsets",
        sa.Column("consumer_group", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.PrimaryKeyConstraint("consumer_group", "topic", "partition"),
        sa.CheckConstraint("partition >= 0", name="mirror_offsets_partition"),
        sa.CheckConstraint("next_offset >= 0", name="mirror_offsets_next_offset"),
    )
    op.create_table(
        "mirror_dead_letters",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
        sa.Column("consumer_group", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("key", postgresql.BYTEA, nullable=True),
        sa.Column("value", postgresql.BYTEA, nullable=True),
        sa.Column(
            "headers", postgresql.JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")
        ),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
    )
    op.create_index(
        "mirror_dead_letters_record",
        "mirror_dead_letters",
        ["consumer_group", "topic", "partition", "offset"],
        unique=True,
    )
    op.create_index("mirror_dead_letters_created_at", "mirror_dead_letters", ["created_at"])


def downgrade() -> None:
    op.drop_table("mirror_dead_letters")
    op.drop_table("mirror_offsets")
