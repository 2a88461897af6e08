"""The relay partition count changes only while every committed row is published.

Revision ID: 0005_partition_count_guard
Revises: 0004_positions_guard
Create Date: 2026-11-23

Lowering ``outbox_settings.partitions`` would strand the rows of the removed partitions;
raising it moves keys to other partitions, where a key's next event could be published
before its earlier ones. Both are safe when no committed row waits to be published, so the
change is refused otherwise. The check first takes a SHARE lock on the outbox: writers in
flight finish (their rows are counted), new ones wait until the change commits (their rows
get the new count).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005_partition_count_guard"
down_revision: str | None = "0004_positions_guard"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION outbox_partition_count_guard() RETURNS trigger
        LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
        DECLARE
          pending bigint;
        BEGIN
          IF NEW.partitions = OLD.partitions THEN
            RETURN NEW;
          END IF;
          LOCK TABLE outbox IN SHARE MODE;
          SELECT count(*) INTO pending
          FROM outbox o
          LEFT JOIN outbox_published_floor f ON f.partition = o.partition
          WHERE o.seq IS NULL OR o.seq > coalesce(f.position, 0);
          IF pending > 0 THEN
            RAISE EXCEPTION
              'cannot change the relay partition count from % to % while % outbox rows are '
              'not published yet', OLD.partitions, NEW.partitions, pending
              USING ERRCODE = 'object_not_in_prerequisite_state',
                    HINT = 'publish them first (relay run --once), with writers paused';
          END IF;
          RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER outbox_partition_count_guard BEFORE UPDATE OF partitions "
        "ON outbox_settings FOR EACH ROW EXECUTE FUNCTION outbox_partition_count_guard()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER outbox_partition_count_guard ON outbox_settings")
    op.execute("DROP FUNCTION outbox_partition_count_guard()")
