"""SQLAlchemy descriptions of the relay's own tables: outbox and mirror bookkeeping
(created by the Alembic migrations, which stay frozen copies)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

metadata = sa.MetaData()

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=True),
    sa.Column("topic", sa.Text, nullable=False),
    sa.Column("key", postgresql.BYTEA, nullable=True),
    sa.Column("value", postgresql.BYTEA, nullable=True),
    sa.Column("event_type", sa.Text, nullable=True),
    sa.Column("headers", postgresql.JSONB, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

outbox_settings = sa.Table(
    "outbox_settings",
    metadata,
    sa.Column("singleton", sa.Boolean, primary_key=True),
    sa.Column("partitions", sa.Integer, nullable=False),
    # Set while rows partitioned with the previous count wait (0009_live_partition_count).
    sa.Column("barrier", sa.BigInteger, nullable=True),
)

outbox_identity = sa.Table(
    "outbox_identity",
    metadata,
    sa.Column("singleton", sa.Boolean, primary_key=True),
    sa.Column("database_id", postgresql.UUID(as_uuid=False), nullable=False),
    sa.Column("default_prefix", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

outbox_published_floor = sa.Table(
    "outbox_published_floor",
    metadata,
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("position", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

mirror_offsets = sa.Table(
    "mirror_offsets",
    metadata,
    sa.Column("consumer_group", sa.Text, primary_key=True),
    sa.Column("topic", sa.Text, primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("topic_id", sa.Text, nullable=True),  # 0008_mirror_topic_id
    sa.Column("topic_partitions", sa.Integer, nullable=True),
)
mirror_dead_letters = sa.Table(
    "mirror_dead_letters",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("consumer_group", sa.Text, nullable=False),
    sa.Column("topic", sa.Text, nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.Column("key", postgresql.BYTEA),
    sa.Column("value", postgresql.BYTEA),
    sa.Column("headers", postgresql.JSONB, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("kafka_timestamp", sa.DateTime(timezone=True)),  # 0012_mirror_dead_letter_time
)
