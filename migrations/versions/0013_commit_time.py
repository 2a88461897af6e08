"""The commit time of each outbox transaction: ``outbox_commits.committed_at``.

Revision ID: 0013_commit_time
Revises: 0012_mirror_dead_letter_time
Create Date: 2026-11-26

``outbox_sequence_at_commit`` (0007_commit_markers) inserts one marker per transaction and
relay partition at commit time; the column's default, ``statement_timestamp()``, stamps
each marker with the time the transaction's ``COMMIT`` began (the INSERT's, for a statement
that commits on its own; ``SET CONSTRAINTS ALL IMMEDIATE``'s, for a transaction that fires
the trigger early with it): the same for every marker of a transaction, so that one
transaction has one commit time. The relay publishes it as a CloudEvents topic's
``ce_time`` (README, "CloudEvents"). Markers written before this migration have none
(NULL: their records carry no ``ce_time``). Additive: the relays of 0011 and 0012 ignore
the column, so they run on it. The default is set after the column is added, so that
adding it rewrites no table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_commit_time"
down_revision: str | None = "0012_mirror_dead_letter_time"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
oldest_compatible: str | None = "0011_outbox_stalls"


def upgrade() -> None:
    op.add_column(
        "outbox_commits", sa.Column("committed_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.alter_column(
        "outbox_commits", "committed_at", server_default=sa.text("statement_timestamp()")
    )


def downgrade() -> None:
    op.drop_column("outbox_commits", "committed_at")
