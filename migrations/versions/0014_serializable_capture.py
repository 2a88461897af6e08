"""SERIALIZABLE writers of several keys both commit: sequencing reads no outbox row.

Revision ID: 0014_serializable_capture
Revises: 0013_commit_time
Create Date: 2026-11-26

At commit, a transaction that wrote rows of several keys or relay partitions read its own
rows back by id range (0007_commit_markers) to learn, per partition, the span of their
ordinals and ids and the keys to lock. Those id ranges hold other writers' rows too: two
SERIALIZABLE writers of several keys each, their inserts interleaved, each read a row the
other wrote (a read/write conflict both ways), and one always failed with SQLSTATE 40001.

Now ``outbox_capture_row`` keeps what the commit needs as the rows are inserted, in the
transaction-local setting ``outbox.parts``, once the transaction writes a second key or
partition: each relay partition's first row (its ordinal and id) and the keys' lock
hashes (up to 16 per partition, then a mark for more), noted only when a row brings a
new partition or key, so a row of a partition and key already noted costs a string
search. A transaction of one key keeps the compact ``outbox.pending`` of 0007 alone, as
before. ``outbox_sequence_at_commit`` locks and draws from these notes as 0007 did from
the rows (I2, docs/invariants.md), each partition's span running from its first row to
the transaction's last (0007's ran to the partition's last row; ordinals interleave
across partitions, so both leave unused positions), and reads no row of the outbox. A
savepoint rolled back takes its notes back with its rows (the setting is
transaction-local).

Upgrade and downgrade lock the outbox (ACCESS EXCLUSIVE) so that no transaction in flight
is sequenced by the other version's functions; rows, markers and positions are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from alembic import op

from relay.postgres.revision_files import load_sibling

revision: str = "0014_serializable_capture"
down_revision: str | None = "0013_commit_time"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Rows, markers and positions are as before: the relays that run on 0013 run on it.
oldest_compatible: str | None = "0011_outbox_stalls"

PARTITION_LOCK_CLASS = 0x0B0B  # as in 0001_outbox and 0007_commit_markers
KEY_LOCK_CLASS = 0x0B0C  # as in 0007_commit_markers
MAX_KEY_LOCKS = 16  # as in 0007_commit_markers

_CAPTURE_ROW = rf"""
CREATE OR REPLACE FUNCTION outbox_capture_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  n integer := TG_ARGV[0]::integer;  -- the relay partition count (outbox_settings)
  hex text;
  p integer;
  key_lock text;
  me text := pg_current_xact_id()::text;
  pending text[] := string_to_array(current_setting('outbox.pending', true), ':');
  parts text;
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
    RETURN NEW;
  END IF;
  NEW.ordinal := pending[5]::integer;
  IF pending[4] = p::text AND pending[6] = key_lock THEN  -- still one partition and key
    PERFORM set_config('outbox.pending', concat_ws(':', me, pending[2], NEW.id, p,
      pending[5]::bigint + 1, key_lock), true);
    RETURN NEW;
  END IF;
  -- Several partitions or keys: outbox.parts notes each partition's first row
  -- (';P:partition:ordinal:id;') and its keys (';K:partition:key lock;'; ';M:partition;'
  -- beyond {MAX_KEY_LOCKS}), only when a row brings a new one.
  parts := coalesce(current_setting('outbox.parts', true), '');
  IF pending[4] <> '-1' THEN  -- the rows so far: one partition and key
    parts := concat(';P:', pending[4], ':0:', pending[2], ';', CASE WHEN pending[6] <> 'n'
                    THEN concat('K:', pending[4], ':', pending[6], ';') END);
  END IF;
  IF strpos(parts, concat(';P:', p, ':')) = 0 THEN
    parts := concat(parts, 'P:', p, ':', NEW.ordinal, ':', NEW.id, ';',
                    CASE WHEN key_lock <> 'n' THEN concat('K:', p, ':', key_lock, ';') END);
    PERFORM set_config('outbox.parts', parts, true);
  ELSIF key_lock <> 'n' AND strpos(parts, concat(';K:', p, ':', key_lock, ';')) = 0
        AND strpos(parts, concat(';M:', p, ';')) = 0 THEN
    IF (length(parts) - length(replace(parts, concat(';K:', p, ':'), '')))
       / length(concat(';K:', p, ':')) >= {MAX_KEY_LOCKS} THEN
      parts := concat(parts, 'M:', p, ';');
    ELSE
      parts := concat(parts, 'K:', p, ':', key_lock, ';');
    END IF;
    PERFORM set_config('outbox.parts', parts, true);
  ELSIF pending[4] <> '-1' THEN
    PERFORM set_config('outbox.parts', parts, true);
  END IF;
  PERFORM set_config('outbox.pending', concat_ws(':', me, pending[2], NEW.id, -1,
    pending[5]::bigint + 1, 'x'), true);
  RETURN NEW;
END
$$
"""

_SEQUENCE_AT_COMMIT = rf"""
CREATE OR REPLACE FUNCTION outbox_sequence_at_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  pending text[] := string_to_array(current_setting('outbox.pending', true), ':');
  parts text := nullif(current_setting('outbox.parts', true), '');
  me xid8 := pg_current_xact_id();
  part record;
  key_lock integer;
  first bigint;
BEGIN
  IF pending IS NULL OR cardinality(pending) <> 6 OR pending[1] <> me::text
     OR (pending[4] = '-1' AND parts IS NULL) THEN
    RAISE EXCEPTION 'outbox.pending was changed by hand; the outbox rows cannot be sequenced'
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  -- Rows inserted after this point (SET CONSTRAINTS ALL IMMEDIATE) start a new batch.
  PERFORM set_config('outbox.pending', '', true), set_config('outbox.parts', '', true);
  -- The relay may publish these rows as soon as they are visible, so their commit
  -- must be durable first: a crash must not lose a commit Kafka already has.
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;
  IF pending[4] <> '-1' THEN  -- one partition, one key (or none)
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
    INSERT INTO outbox_commits VALUES (pending[4]::integer, first,
      first + pending[5]::bigint - 1, first, me, pending[2]::bigint, pending[3]::bigint);
    RETURN NULL;
  END IF;
  -- Several partitions or keys: from the notes outbox_capture_row kept, in partition
  -- order (more than {MAX_KEY_LOCKS} keys in a partition: its lock EXCLUSIVE), then the
  -- keys' locks in hash order. Each partition's span runs from its first row to the
  -- transaction's last (ordinal and id), as 0007's ran to the partition's last row.
  FOR part IN SELECT split_part(t, ':', 2)::integer AS p,
                     bool_or(split_part(t, ':', 1) = 'M') AS many
              FROM string_to_table(parts, ';') t WHERE t <> '' GROUP BY 1 ORDER BY 1 LOOP
    IF part.many THEN
      PERFORM pg_advisory_xact_lock({PARTITION_LOCK_CLASS}, part.p);
    ELSE
      PERFORM pg_advisory_xact_lock_shared({PARTITION_LOCK_CLASS}, part.p);
    END IF;
  END LOOP;
  FOR key_lock IN
    SELECT DISTINCT split_part(t, ':', 3)::integer FROM string_to_table(parts, ';') t
    WHERE split_part(t, ':', 1) = 'K'
      AND NOT strpos(parts, concat(';M:', split_part(t, ':', 2), ';')) > 0
    ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock({KEY_LOCK_CLASS}, key_lock);
  END LOOP;
  FOR part IN SELECT split_part(t, ':', 2)::integer AS p, split_part(t, ':', 3)::bigint AS low,
                     split_part(t, ':', 4)::bigint AS lo
              FROM string_to_table(parts, ';') t WHERE split_part(t, ':', 1) = 'P'
              ORDER BY 1 LOOP
    SELECT min(v) INTO first FROM (
      SELECT nextval('outbox_seq') AS v FROM generate_series(part.low, pending[5]::bigint - 1)
    ) drawn;
    INSERT INTO outbox_commits VALUES (part.p, first, first + pending[5]::bigint - 1 - part.low,
      first - part.low, me, part.lo, pending[3]::bigint);
  END LOOP;
  RETURN NULL;
END
$$
"""


def _commit_markers() -> ModuleType:
    """0007_commit_markers, whose functions the downgrade restores."""
    return load_sibling(__file__, "0007_commit_markers.py")


def _or_replace(definition: str) -> str:
    return definition.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def upgrade() -> None:
    # Writers in flight finish first: none is sequenced by functions it did not start with.
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    op.execute(_CAPTURE_ROW)
    op.execute(_SEQUENCE_AT_COMMIT)


def downgrade() -> None:
    markers = _commit_markers()
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    op.execute(_or_replace(markers._CAPTURE_ROW))
    op.execute(_or_replace(markers._SEQUENCE_AT_COMMIT))
