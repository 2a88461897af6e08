"""Mirrored table for the demo's orders (an Alembic revision for your own history, see
docs/mirror.md).

Revision ID: 0003_orders_mirror
Create Date: 2026-11-22

To mirror into your own database, copy this file into your service's own Alembic history
(``down_revision`` set to your latest revision) and run ``alembic upgrade head`` after
``relay db upgrade``; the demo (examples/orders_demo.py) runs its ``upgrade()`` directly.
The table has the key column(s) of the mapping as its primary key, one column per mapped
JSON field, and a ``bigint`` version column the mirror fills (here the outbox seq).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_orders_mirror"
down_revision: str | None = None  # your latest revision
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "orders_mirror",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("customer", sa.Text, nullable=False),
        sa.Column("total_cents", sa.BigInteger, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("source_seq", sa.BigInteger, nullable=False),
    )
    op.create_index("orders_mirror_customer", "orders_mirror", ["customer"])
    # With least-privilege roles (`relay db roles`), the mirror's role may write it:
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_mirror') THEN "
        "GRANT SELECT, INSERT, UPDATE, DELETE ON orders_mirror TO outbox_mirror; END IF; END $$"
    )


def downgrade() -> None:
    op.drop_table("orders_mirror")
