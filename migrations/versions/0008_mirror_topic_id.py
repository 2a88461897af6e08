"""The topic each stored mirror offset belongs to: its Kafka topic id and partition count.

Revision ID: 0008_mirror_topic_id
Revises: 0007_commit_markers
Create Date: 2026-11-23

A topic deleted and created again under the same name starts again at offset 0, and a
stored ``next_offset`` of the old topic would make the mirror skip the new topic's first
records. ``mirror_offsets.topic_id`` (Kafka's topic id, in its base64 form) records which
topic the offset was taken from; the mirror refuses an offset of another topic id. Rows
stored before this revision have none (NULL): the mirror records the topic's current id
with their next batch.

``mirror_offsets.topic_partitions`` records how many partitions the topic had when the
offset was stored: partitions added since move keys to other partitions, which the
mirror reports, or refuses for a table whose versions are Kafka offsets.

Both columns are nullable: rows stored before keep working, and the downgrade only drops
them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_mirror_topic_id"
down_revision: str | None = "0007_commit_markers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("mirror_offsets", sa.Column("topic_id", sa.Text, nullable=True))
    op.add_column("mirror_offsets", sa.Column("topic_partitions", sa.Integer, nullable=True))
    op.create_check_constraint(
        "mirror_offsets_topic_partitions", "mirror_offsets", "topic_partitions > partition"
    )


def downgrade() -> None:
    op.drop_constraint("mirror_offsets_topic_partitions", "mirror_offsets", type_="check")
    op.drop_column("mirror_offsets", "topic_partitions")
    op.drop_column("mirror_offsets", "topic_id")
