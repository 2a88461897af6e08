"""What holds a relay partition, for operators; the keys the dead letters hold.

Revision ID: 0011_outbox_stalls
Revises: 0010_mirror_freshness
Create Date: 2026-11-26

* ``outbox_stalls``: one row per relay partition whose batch is being retried, written by
  the relay that owns the partition when the retries begin and deleted when a batch goes
  through again (or the relay stops): the row it waits for (when one row is at fault, e.g.
  its topic does not exist), the reason, and since when. ``relay status`` shows it.
* An index on ``outbox_dead_letters (key)``: while a dead letter of a key exists, the
  later rows of that key follow it to the dead letters (I2: they never overtake it); the
  relay looks the keys of each batch up there.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_outbox_stalls"
down_revision: str | None = "0010_mirror_freshness"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Only relays that know it: an older relay would let a key's rows overtake its dead letter.
oldest_compatible: str | None = None

_GRANTS = """
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_relay') THEN
    GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_stalls TO outbox_relay;
  END IF;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "outbox_stalls",
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("outbox_id", sa.BigInteger, nullable=True),
        sa.Column("topic", sa.Text, nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column(
            "since", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
        ),
    )
    op.create_index(
        "outbox_dead_letters_key",
        "outbox_dead_letters",
        ["key"],
        postgresql_where=sa.text("key IS NOT NULL"),
    )
    op.execute(_GRANTS)


def downgrade() -> None:
    op.drop_index("outbox_dead_letters_key", table_name="outbox_dead_letters")
    op.drop_table("outbox_stalls")
