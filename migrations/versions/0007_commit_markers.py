"""Commit-time sequencing with one marker per transaction and relay partition.

Revision ID: 0007_commit_markers
Revises: 0006_sequence_check_by_key
Create Date: 2026-11-23

Until now every outbox row was inserted unsequenced and then UPDATEd with its ``seq`` at
commit, under an exclusive lock per relay partition held through the commit's WAL flush:
a second row version and its index entries per event, and one commit per partition per
flush. Now outbox rows are never updated (I2, docs/invariants.md):

* On insert, ``outbox_capture_row`` (BEFORE INSERT; the relay partition count is its
  argument, re-created when the count changes) sets the row's relay partition, its
  transaction id (``txid``) and its ``ordinal`` (0, 1, ... in the order the transaction
  inserted its rows), and notes the transaction's pending rows in a transaction-local
  setting, ``outbox.pending``: ``txid:first id:last id:partition:rows:key lock``, where
  partition is -1 once rows of several partitions are pending, and key lock is the key's
  hash, ``n`` for rows without a key, ``x`` once rows of several keys are pending.
* Only the first pending row queues the deferred trigger (its ``WHEN`` clause compares the
  row's id with the setting's first id, evaluated at insert), so a transaction queues one
  trigger event, not one per row. At commit, ``outbox_sequence_at_commit`` takes, per
  relay partition written and in partition order, a SHARED advisory lock on the partition
  and then EXCLUSIVE advisory locks on the keys' hashes, in hash order (more than 16 keys
  in one partition: the partition's lock EXCLUSIVE instead); it draws ``outbox_seq``
  values for the span of the partition's ordinals and inserts one marker into
  ``outbox_commits``: (partition, first_seq, last_seq, base, txid, first_id, last_id).
  A row's position is ``base + ordinal``: increasing with its id, fixed for good
  (removing one row moves no other). The locks are released after the commit is
  visible.
* Writers of one key therefore draw in commit order; writers of different keys no longer
  wait for each other, so their commits share WAL flushes. A reader learns how far a
  partition is settled with ``outbox_horizon(p)``: it takes the partition's lock
  EXCLUSIVE for an instant (waiting for the writers that hold it SHARED, at most 50 ms),
  reads ``outbox_seq``, and lets go: every marker of ``p`` at or below that value is
  committed and visible, or will never exist (gap-free). When a transaction that holds
  the lock does not finish (a prepared transaction nobody commits, or an idle one after
  ``SET CONSTRAINTS ALL IMMEDIATE``), the horizon returns NULL and the reader keeps the
  last one; writers are held up at most 50 ms by each attempt.

Rows sequenced before this revision keep their ``seq`` (and the partial unique index
``outbox_legacy_seq``); they are below every position drawn after it, and the relay
publishes them first. ``outbox_positions`` shows every row with its position.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_commit_markers"
down_revision: str | None = "0006_sequence_check_by_key"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PARTITION_LOCK_CLASS = 0x0B0B  # as in 0001_outbox; the second key is the relay partition
KEY_LOCK_CLASS = 0x0B0C  # the second key is the first 32 bits of sha256(key)
MAX_KEY_LOCKS = 16  # per relay partition and transaction; beyond, the partition EXCLUSIVE
HORIZON_LOCK_TIMEOUT = "50ms"

_CAPTURE_ROW = r"""
CREATE FUNCTION outbox_capture_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  n integer := TG_ARGV[0]::integer;  -- the relay partition count (outbox_settings)
  hex text;
  p integer;
  key_lock text;
  me text := pg_current_xact_id()::text;
  pending text[] := string_to_array(current_setting('outbox.pending', true), ':');
BEGIN
  IF NEW.key IS NULL THEN
    p := NEW.id % n;
    key_lock := 'n';
  ELSE
    hex := substr(encode(sha256(NEW.key), 'hex'), 1, 8);
    -- as outbox_partition_of(key, n): the first 28 bits, modulo the partition count
    p := ('x' || substr(hex, 1, 7))::bit(28)::integer % n;
    key_lock := ('x' || hex)::bit(32)::integer::text;
  END IF;
  NEW.partition := p;
  NEW.seq := NULL;
  NEW.txid := me;
  IF pending IS NULL OR cardinality(pending) <> 6 OR pending[1] <> me THEN
    NEW.ordinal := 0;
    PERFORM set_config('outbox.pending', concat_ws(':', me, NEW.id, NEW.id, p, 1, key_lock), true);
  ELSE
    NEW.ordinal := pending[5]::integer;
    PERFORM set_config('outbox.pending', concat_ws(':', me, pending[2], NEW.id,
      CASE WHEN pending[4] = p::text THEN pending[4] ELSE '-1' END,
      pending[5]::bigint + 1,
      CASE WHEN pending[6] = key_lock THEN key_lock ELSE 'x' END), true);
  END IF;
  RETURN NEW;
END
$$
"""

# The partition count is the trigger's argument, so that no row reads outbox_settings;
# outbox_partition_count_guard re-creates the trigger when the count changes.
_CAPTURE_ROW_TRIGGER = """
CREATE FUNCTION outbox_capture_row_trigger(partitions integer) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  DROP TRIGGER IF EXISTS outbox_capture_row ON outbox;
  EXECUTE format('CREATE TRIGGER outbox_capture_row BEFORE INSERT ON outbox '
                 'FOR EACH ROW EXECUTE FUNCTION outbox_capture_row(%s)', partitions);
END
$$
"""

_SEQUENCE_AT_COMMIT = rf"""
CREATE FUNCTION outbox_sequence_at_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  pending text[] := string_to_array(current_setting('outbox.pending', true), ':');
  me xid8 := pg_current_xact_id();
  lo bigint;
  hi bigint;
  parts integer[];
  keys bigint[];
  lows bigint[];
  spans bigint[];
  los bigint[];
  his bigint[];
  by_key integer[] := '{{}}';
  key_lock integer;
  first bigint;
BEGIN
  IF pending IS NULL OR cardinality(pending) <> 6 OR pending[1] <> me::text THEN
    RAISE EXCEPTION 'outbox.pending was changed by hand; the outbox rows cannot be sequenced'
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  -- Rows inserted after this point (SET CONSTRAINTS ALL IMMEDIATE) start a new batch.
  PERFORM set_config('outbox.pending', '', true);
  -- The relay may publish these rows as soon as they are visible, so their commit
  -- must be durable first: a crash must not lose a commit Kafka already has.
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;
  lo := pending[2]::bigint;
  hi := pending[3]::bigint;
  IF pending[4] <> '-1' AND pending[6] <> 'x' THEN  -- one partition, one key (or none)
    PERFORM pg_advisory_xact_lock_shared({PARTITION_LOCK_CLASS}, pending[4]::integer);
    IF pending[6] <> 'n' THEN
      PERFORM pg_advisory_xact_lock({KEY_LOCK_CLASS}, pending[6]::integer);
    END IF;
    IF pending[5] = '1' THEN
      first := nextval('outbox_seq');
    ELSE
      SELECT min(v) INTO first FROM (
        SELECT nextval('outbox_seq') AS v FROM generate_series(1, pending[5]::bigint)
      ) drawn;
    END IF;
    INSERT INTO outbox_commits VALUES
      (pending[4]::integer, first, first + pending[5]::bigint - 1, first, me, lo, hi);
    RETURN NULL;
  END IF;
  -- Several partitions or keys: the transaction's own rows, read by their id range (one
  -- aggregate, then the key hashes of the partitions locked key by key).
  SELECT array_agg(s.partition ORDER BY s.partition), array_agg(s.keys ORDER BY s.partition),
         array_agg(s.low ORDER BY s.partition), array_agg(s.span ORDER BY s.partition),
         array_agg(s.lo ORDER BY s.partition), array_agg(s.hi ORDER BY s.partition)
  INTO parts, keys, lows, spans, los, his
  FROM (
    SELECT o.partition, count(DISTINCT o.key) AS keys, min(o.ordinal) AS low,
           max(o.ordinal) - min(o.ordinal) + 1 AS span, min(o.id) AS lo, max(o.id) AS hi
    FROM outbox o WHERE o.id BETWEEN lo AND hi AND o.txid = me
    GROUP BY o.partition
  ) s;
  IF parts IS NULL THEN
    RETURN NULL;  -- the rows were deleted before the commit
  END IF;
  FOR i IN 1 .. cardinality(parts) LOOP
    IF keys[i] > {MAX_KEY_LOCKS} THEN
      PERFORM pg_advisory_xact_lock({PARTITION_LOCK_CLASS}, parts[i]);
    ELSE
      PERFORM pg_advisory_xact_lock_shared({PARTITION_LOCK_CLASS}, parts[i]);
      by_key := by_key || parts[i];
    END IF;
  END LOOP;
  IF cardinality(by_key) > 0 THEN
    FOR key_lock IN
      SELECT DISTINCT ('x' || substr(encode(sha256(o.key), 'hex'), 1, 8))::bit(32)::integer
      FROM outbox o
      WHERE o.id BETWEEN lo AND hi AND o.txid = me AND o.key IS NOT NULL
        AND o.partition = ANY(by_key)
      ORDER BY 1
    LOOP
      PERFORM pg_advisory_xact_lock({KEY_LOCK_CLASS}, key_lock);
    END LOOP;
  END IF;
  FOR i IN 1 .. cardinality(parts) LOOP
    SELECT min(v) INTO first FROM (
      SELECT nextval('outbox_seq') AS v FROM generate_series(1, spans[i])
    ) drawn;
    INSERT INTO outbox_commits VALUES
      (parts[i], first, first + spans[i] - 1, first - lows[i], me, los[i], his[i]);
  END LOOP;
  RETURN NULL;
END
$$
"""

_HORIZON = f"""
CREATE FUNCTION outbox_horizon(p integer) RETURNS bigint
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

_POSITIONS = """
CREATE VIEW outbox_positions AS
SELECT o.id, o.partition, o.seq AS position, o.topic, o.key, o.value, o.event_type,
       o.headers, o.created_at
FROM outbox o WHERE o.seq IS NOT NULL
UNION ALL
SELECT o.id, o.partition, m.base + o.ordinal, o.topic, o.key, o.value, o.event_type,
       o.headers, o.created_at
FROM outbox_commits m
JOIN outbox o ON o.id BETWEEN m.first_id AND m.last_id AND o.txid = m.txid
  AND o.partition = m.partition
"""

_PARTITION_COUNT_GUARD = """
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

_GRANTS = """
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_relay') THEN
    GRANT SELECT, DELETE ON outbox_commits TO outbox_relay;
    GRANT SELECT ON outbox_positions TO outbox_relay;
    GRANT EXECUTE ON FUNCTION outbox_horizon(integer) TO outbox_relay;
  END IF;
END
$$
"""


def upgrade() -> None:
    # ACCESS EXCLUSIVE: writers in flight finish first, so every committed row has a seq.
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    op.execute("ALTER TABLE outbox ADD COLUMN txid xid8, ADD COLUMN ordinal integer")
    op.drop_index("outbox_unsequenced", table_name="outbox")
    op.drop_index("outbox_partition_seq", table_name="outbox")
    op.create_index(
        "outbox_legacy_seq",
        "outbox",
        ["partition", "seq"],
        unique=True,
        postgresql_where=sa.text("seq IS NOT NULL"),
    )
    op.execute(
        """
        CREATE TABLE outbox_commits (
          partition integer NOT NULL,
          first_seq bigint NOT NULL,
          last_seq bigint NOT NULL,
          base bigint NOT NULL,
          txid xid8 NOT NULL,
          first_id bigint NOT NULL,
          last_id bigint NOT NULL,
          CONSTRAINT outbox_commits_pkey PRIMARY KEY (partition, last_seq)
        )
        """
    )
    op.execute("DROP TRIGGER outbox_sequence_at_commit ON outbox")
    op.execute("DROP TRIGGER outbox_assign_partition ON outbox")
    op.execute("DROP FUNCTION outbox_sequence_at_commit()")
    op.execute("DROP FUNCTION outbox_assign_partition()")
    op.execute(_CAPTURE_ROW)
    op.execute(_CAPTURE_ROW_TRIGGER)
    op.execute("SELECT outbox_capture_row_trigger(partitions) FROM outbox_settings")
    op.execute(_SEQUENCE_AT_COMMIT)
    op.execute(
        """
        CREATE CONSTRAINT TRIGGER outbox_sequence_at_commit AFTER INSERT ON outbox
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
        WHEN (split_part(current_setting('outbox.pending', true), ':', 2) = NEW.id::text)
        EXECUTE FUNCTION outbox_sequence_at_commit()
        """
    )
    op.execute(_HORIZON)
    op.execute(_POSITIONS)
    op.execute(_PARTITION_COUNT_GUARD)
    op.execute(_GRANTS)


def downgrade() -> None:
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    # Rows sequenced by markers get their position as seq, as 0006 would have given them.
    op.execute(
        """
        UPDATE outbox o SET seq = p.position
        FROM outbox_positions p WHERE p.id = o.id AND o.seq IS NULL
        """
    )
    op.execute(_PARTITION_COUNT_GUARD_0005)
    op.execute("DROP VIEW outbox_positions")
    op.execute("DROP FUNCTION outbox_horizon(integer)")
    op.execute("DROP TRIGGER outbox_sequence_at_commit ON outbox")
    op.execute("DROP TRIGGER outbox_capture_row ON outbox")
    op.execute("DROP FUNCTION outbox_capture_row_trigger(integer)")
    op.execute("DROP FUNCTION outbox_sequence_at_commit()")
    op.execute("DROP FUNCTION outbox_capture_row()")
    op.drop_table("outbox_commits")
    op.drop_index("outbox_legacy_seq", table_name="outbox")
    op.drop_column("outbox", "ordinal")
    op.drop_column("outbox", "txid")
    op.create_index("outbox_partition_seq", "outbox", ["partition", "seq"], unique=True)
    op.create_index(
        "outbox_unsequenced", "outbox", ["partition"], postgresql_where=sa.text("seq IS NULL")
    )
    op.execute(_ASSIGN_PARTITION_0001)
    op.execute(
        "CREATE TRIGGER outbox_assign_partition BEFORE INSERT ON outbox "
        "FOR EACH ROW EXECUTE FUNCTION outbox_assign_partition()"
    )
    op.execute(_SEQUENCE_AT_COMMIT_0006)
    op.execute(
        "CREATE CONSTRAINT TRIGGER outbox_sequence_at_commit AFTER INSERT ON outbox "
        "DEFERRABLE INITIALLY DEFERRED "
        "FOR EACH ROW EXECUTE FUNCTION outbox_sequence_at_commit()"
    )


# What downgrade() restores: the functions as 0001_outbox, 0002_outbox_safety,
# 0005_partition_count_guard and 0006_sequence_check_by_key left them.
_PARTITION_COUNT_GUARD_0005 = (
    _PARTITION_COUNT_GUARD.replace("FROM outbox_positions o", "FROM outbox o")
    .replace("WHERE o.position > coalesce", "WHERE o.seq IS NULL OR o.seq > coalesce")
    .replace("  PERFORM outbox_capture_row_trigger(NEW.partitions);\n", "")
)

_ASSIGN_PARTITION_0001 = """
CREATE FUNCTION outbox_assign_partition() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  n integer;
BEGIN
  SELECT partitions INTO STRICT n FROM outbox_settings;
  IF NEW.key IS NULL THEN
    NEW.partition := NEW.id % n;
  ELSE
    NEW.partition := outbox_partition_of(NEW.key, n);
  END IF;
  NEW.seq := NULL;
  RETURN NEW;
END
$$
"""

_SEQUENCE_AT_COMMIT_0006 = f"""
CREATE FUNCTION outbox_sequence_at_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  p integer;
  done bigint;
BEGIN
  SELECT seq INTO done FROM outbox WHERE id = NEW.id;
  IF NOT FOUND OR done IS NOT NULL THEN
    RETURN NULL;
  END IF;
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;
  FOR p IN SELECT DISTINCT partition FROM outbox WHERE seq IS NULL ORDER BY 1 LOOP
    PERFORM pg_advisory_xact_lock({PARTITION_LOCK_CLASS}, p);
  END LOOP;
  UPDATE outbox o SET seq = s.seq
  FROM (
    SELECT q.id, nextval('outbox_seq') AS seq
    FROM (SELECT id FROM outbox WHERE seq IS NULL ORDER BY id) q
  ) s
  WHERE o.id = s.id;
  RETURN NULL;
END
$$
"""
