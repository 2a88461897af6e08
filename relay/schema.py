"""SQLAlchemy descriptions of the relay's tables (created by the Alembic migrations)."""

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
)
