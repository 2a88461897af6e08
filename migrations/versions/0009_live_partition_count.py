"""Raising the relay partition count on a live outbox, keeping per-key order.

Revision ID: 0009_live_partition_count
Revises: 0008_mirror_topic_id
Create Date: 2026-11-23

Until now the count could change only with every committed row published (writers
paused). Raising it moves keys to other partitions, where a key's next event could be
published before its earlier ones; now the change keeps the order instead of refusing:

* ``outbox_partition_count_guard`` locks the outbox in SHARE mode, so the change waits for
  every transaction that inserted rows under the old count to finish, and new writers
  wait for the change. If rows are still unpublished, it records the highest position
  drawn so far as ``outbox_settings.barrier``: every row at or below it was partitioned
  with the old count, every row above it with the new one.
* ``outbox_horizon(p)`` does not settle a partition above the barrier while any row at or
  below it, in any partition, is unpublished (above its partition's floor,
  ``outbox_published_floor``); the first call that finds none clears the barrier. So a
  key's events of the old partition are all published before any of its new one.
* Lowering the count still needs every row published (the removed partitions' rows would
  have no relay), as does a second change while a barrier is pending.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_live_partition_count"
down_revision: str | None = "0008_mirror_topic_id"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PARTITION_LOCK_CLASS = 0x0B0B  # as in 0001_outbox and 0007_commit_markers
HORIZON_LOCK_TIMEOUT = "50ms"  # as in 0007_commit_markers

# Whether a row at or below position ``b`` is not published yet (above its partition's
# floor): rows sequenced before 0007 by their seq, later ones through their markers.
_UNPUBLISHED_UP_TO = """
CREATE FUNCTION outbox_unpublished_up_to(b bigint) RETURNS boolean
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
  SELECT EXISTS (
    SELECT 1 FROM outbox o
    LEFT JOIN outbox_published_floor f ON f.partition = o.partition
    WHERE o.seq IS NOT NULL AND o.seq <= b AND o.seq > coalesce(f.position, 0)
  ) OR EXISTS (
    SELECT 1 FROM outbox_commits m
    LEFT JOIN outbox_published_floor f ON f.partition = m.partition
    WHERE m.first_seq <= b AND m.last_seq > coalesce(f.position, 0)
      AND EXISTS (
        SELECT 1 FROM outbox o
        WHERE o.id BETWEEN m.first_id AND m.last_id AND o.txid = m.txid
          AND o.partition = m.partition
          AND m.base + o.ordinal <= b AND m.base + o.ordinal > coalesce(f.position, 0)
      )
  )
$$
"""

_HORIZON = f"""
CREATE OR REPLACE FUNCTION outbox_horizon(p integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
SET lock_timeout = '{HORIZON_LOCK_TIMEOUT}' AS $$
DECLARE
  settled bigint;
  held bigint;
BEGIN
  -- Held until the caller's transaction ends: call it in a transaction of its own.
  PERFORM pg_advisory_xact_lock({PARTITION_LOCK_CLASS}, p);
  settled := (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_seq);
  held := (SELECT barrier FROM outbox_settings);
  IF held IS NOT NULL AND settled > held THEN
    IF outbox_unpublished_up_to(held) THEN
      RETURN held;  -- rows of the old count first
    END IF;
    UPDATE outbox_settings SET barrier = NULL WHERE barrier = held;
  END IF;
  RETURN settled;
EXCEPTION WHEN lock_not_available THEN
  RETURN NULL;
END
$$
"""

_HORIZON_0007 = f"""
CREATE OR REPLACE FUNCTION outbox_horizon(p integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
SET lock_timeout = '{HORIZON_LOCK_TIMEOUT}' AS $$
BEGIN
  -- Held until the caller's transaction ends: call it in a transaction of its own.
  PERFORM pg_advisory_xact_lock({PARTITION_LOCK_CLASS}, p);
  RETURN (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_seq);
EXCEPTION WHEN lock_not_available THEN
  RETURN NULL;
END
$$
"""

_GUARD = """
CREATE OR REPLACE FUNCTION outbox_partition_count_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  pending bigint;
BEGIN
  IF NEW.partitions = OLD.partitions THEN
    RETURN NEW;
  END IF;
  -- Waits for every transaction that inserted rows under the old count; new writers
  -- wait for this one.
  LOCK TABLE outbox IN SHARE MODE;
  SELECT count(*) INTO pending
  FROM outbox_positions o
  LEFT JOIN outbox_published_floor f ON f.partition = o.partition
  WHERE o.position > coalesce(f.position, 0);
  IF pending > 0 AND NEW.partitions < OLD.partitions THEN
    RAISE EXCEPTION
      'cannot lower the relay partition count from % to % while % outbox rows are '
      'not published yet', OLD.partitions, NEW.partitions, pending
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'publish them first (relay run --once), with writers paused';
  END IF;
  IF pending > 0 AND OLD.barrier IS NOT NULL AND outbox_unpublished_up_to(OLD.barrier) THEN
    RAISE EXCEPTION
      'cannot change the relay partition count from % to % before the rows of the last '
      'change (up to position %) are published', OLD.partitions, NEW.partitions, OLD.barrier
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'let the relay publish them, then try again';
  END IF;
  NEW.barrier := CASE WHEN pending > 0 THEN
    (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_seq) END;
  PERFORM outbox_capture_row_trigger(NEW.partitions);
  RETURN NEW;
END
$$
"""

_GUARD_0007 = """
CREATE OR REPLACE FUNCTION outbox_partition_count_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  pending bigint;
BEGIN
  IF NEW.partitions = OLD.partitions THEN
    RETURN NEW;
  END IF;
  LOCK TABLE outbox IN SHARE MODE;
  SELECT count(*) INTO pending
  FROM outbox_positions o
  LEFT JOIN outbox_published_floor f ON f.partition = o.partition
  WHERE o.position > coalesce(f.position, 0);
  IF pending > 0 THEN
    RAISE EXCEPTION
      'cannot change the relay partition count from % to % while % outbox rows are '
      'not published yet', OLD.partitions, NEW.partitions, pending
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'publish them first (relay run --once), with writers paused';
  END IF;
  PERFORM outbox_capture_row_trigger(NEW.partitions);
  RETURN NEW;
END
$$
"""


def upgrade() -> None:
    op.add_column("outbox_settings", sa.Column("barrier", sa.BigInteger, nullable=True))
    op.execute(_UNPUBLISHED_UP_TO)
    op.execute(_HORIZON)
    op.execute(_GUARD)


def downgrade() -> None:
    op.execute(_GUARD_0007)
    op.execute(_HORIZON_0007)
    op.execute("DROP FUNCTION outbox_unpublished_up_to(bigint)")
    op.drop_column("outbox_settings", "barrier")
