"""The Kafka timestamp of a mirror dead letter.

Revision ID: 0012_mirror_dead_letter_time
Revises: 0011_outbox_stalls
Create Date: 2026-11-26

``mirror_dead_letters.kafka_timestamp``: the record's Kafka timestamp, kept with its key,
value and headers, so that ``relay dead-letters replay --mirror`` applies the record as it
was consumed: an scd2 table's version is valid from it and a ``kafka_timestamp`` metadata
column gets it. Dead letters stored before this migration have none (NULL). Additive: the
mirrors of 0011 leave it NULL, so they run on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_mirror_dead_letter_time"
down_revision: str | None = "0011_outbox_stalls"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
oldest_compatible: str | None = "0011_outbox_stalls"


def upgrade() -> None:
    op.add_column(
        "mirror_dead_letters",
        sa.Column("kafka_timestamp", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("mirror_dead_letters", "kafka_timestamp")
