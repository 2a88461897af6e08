"""Positions drawn by the relay, in commit order: no function runs in a writer's transaction.

Revision ID: 0017_relay_drawn_positions
Revises: 0016_shared_single_draws
Create Date: 2026-11-27

Until now every outbox row ran ``outbox_capture_row`` (BEFORE INSERT, PL/pgSQL) and every
transaction ``outbox_sequence_at_commit`` (deferred), which drew its positions at commit
under advisory locks on its partitions and keys, held through the commit's WAL flush: a
service wrote at 0.5-0.7x a trigger-less outbox, and writers of one hot key committed
one WAL flush at a time. Now a writer only inserts rows (I2, docs/invariants.md):

* ``txid`` defaults to ``pg_current_xact_id()``; the check ``outbox_written_plainly``
  (NOT VALID: rows already written keep theirs) refuses a row that sets its own
  ``txid``, ``partition``, ``ordinal`` or ``seq``.
* ``outbox_draw()``, called by the relay (`relay run`'s commit watch every 10 ms; a
  ``--once`` run or Spark task before each read, through ``outbox_horizon``; one draw at
  a time, each after the one before has committed), draws positions for the
  transactions that have become visible since its last draw (``outbox_draws.seen``,
  that draw's snapshot), in the order of their commit timestamps
  (``track_commit_timestamp``, which this revision needs; a transaction's own rows in
  the order it inserted them), and inserts one marker per relay partition (and 10,000
  rows), whose ``ids`` list the partition's rows in position order from ``first_seq``
  and ``times`` their transactions' commit times. A transaction visible at one draw is
  drawn before one visible only at a later draw; within a draw, the earlier commit
  timestamp goes first. So a transaction whose commit was visible before another's began
  (the second waited for a row lock the first held, or read what it wrote) has the
  smaller positions, and commits that overlap may be numbered in either order. The
  relay partition is the key's, with the count in force at the draw.
* The draw commits with ``synchronous_commit`` on: its commit record follows the commit
  records of the transactions it drew, so they are durable before the relay can publish
  them, whatever the writers' own setting.
* A reader's horizon is the highest position drawn by a committed draw: every position
  at or below it is in a committed marker, whose rows are committed (gap-free). No
  writer holds it up any more: a transaction that does not finish is drawn when it
  commits. ``outbox_horizon`` and ``outbox_horizon_as_of`` draw first;
  ``outbox_drawn_horizon`` and ``outbox_drawn_horizon_as_of`` read what committed draws
  placed (`relay run`'s partitions, beside the commit watch).
* The draw reads rows above ``outbox_draws.cursor`` only. The cursor moves up to the
  outbox id issued before a check once every transaction that held the outbox's
  RowExclusiveLock at that check (``check_vxids``, from ``pg_locks``) has ended: every row
  at or below it is then visible, or rolled back.

Markers of the transactions sequenced before this revision get their ``ids`` (NULL for a
position whose row is gone); ``outbox_seq`` is no longer drawn from. Upgrade and downgrade
lock the outbox (ACCESS EXCLUSIVE) so that no transaction in flight is sequenced by the
other version; the downgrade draws what is committed first.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from alembic import op

from relay.postgres.revision_files import load_sibling

revision: str = "0017_relay_drawn_positions"
down_revision: str | None = "0016_shared_single_draws"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DRAW_LOCK_CLASS = 0x0B0E  # one draw at a time; a partition count change waits for it
MARKER_ROWS = 10_000  # at most, per marker: a fetch reads a slice of one marker's ids
DRAW_WORK_MEM = "256MB"  # a backlog's draw sorts its rows in memory (a million: ~100 MB)
# At most one check per interval (each reads pg_locks twice, which takes every lock
# partition's lock for an instant): the cursor trails the ids issued by about as much.
CHECK_INTERVAL_MS = 50

_NEEDS_COMMIT_TIMESTAMPS = """
DO $$
BEGIN
  IF current_setting('track_commit_timestamp') <> 'on' THEN
    RAISE EXCEPTION 'track_commit_timestamp is off: the relay orders outbox transactions '
      'by their commit time; set track_commit_timestamp = on in postgresql.conf, restart '
      'the server, then upgrade again'
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
END
$$
"""

_DRAWS = """
CREATE TABLE outbox_draws (
  singleton boolean PRIMARY KEY DEFAULT true CONSTRAINT outbox_draws_one_row CHECK (singleton),
  drawn bigint NOT NULL,
  cursor bigint NOT NULL,
  seen pg_snapshot,
  as_of timestamptz,
  check_top bigint,
  check_vxids text[],
  checked_at timestamptz,
  drawn_at timestamptz
)
"""

# The highest position drawn by a committed draw (or by this one), and the time as of
# which every commit visible then is at or below it.
_DRAW = rf"""
CREATE FUNCTION outbox_draw(OUT drawn bigint, OUT as_of timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
SET work_mem = '{DRAW_WORK_MEM}' AS $$
DECLARE
  d outbox_draws%ROWTYPE;
  n integer;
  t timestamptz;
  top bigint;
  cleared boolean;
  snap pg_snapshot;
  found_rows bigint;
  checks_moved boolean := false;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'outbox_draw() runs in READ COMMITTED only (each of its statements '
      'must see the commits before it)' USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  IF current_setting('track_commit_timestamp') <> 'on' THEN
    RAISE EXCEPTION 'track_commit_timestamp is off: the relay orders outbox transactions '
      'by their commit time; set track_commit_timestamp = on in postgresql.conf and '
      'restart the server' USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  -- One draw at a time, each after the one before has committed: a draw covers every
  -- commit visible before it was called.
  PERFORM pg_advisory_xact_lock({DRAW_LOCK_CLASS}, 0);
  t := clock_timestamp();  -- before the snapshots below: commits visible before it are seen
  SELECT * INTO STRICT d FROM outbox_draws;
  top := (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_id_seq);
  IF top <= d.cursor THEN  -- no row above the cursor: nothing to draw
    drawn := d.drawn;
    as_of := t;
    RETURN;
  END IF;
  IF pg_current_xact_id_if_assigned() IS NOT NULL AND EXISTS (
       SELECT FROM outbox o WHERE o.id > d.cursor AND o.txid = pg_current_xact_id()) THEN
    -- Its rows are visible to it alone, and it has no commit time yet.
    RAISE EXCEPTION 'outbox_draw() cannot run in a transaction that wrote outbox rows'
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  n := (SELECT partitions FROM outbox_settings);
  cleared := d.check_vxids IS NULL OR NOT EXISTS (
    SELECT FROM pg_locks l WHERE l.virtualtransaction = ANY(d.check_vxids));
  WITH fresh AS MATERIALIZED (
    SELECT o.id, o.txid,
           CASE WHEN o.key IS NULL THEN (o.id % n)::integer
                ELSE outbox_partition_of(o.key, n) END AS p,
           pg_xact_commit_timestamp(o.xmin) AS ts  -- the inserting (sub)transaction's
    FROM outbox o
    WHERE o.id > d.cursor AND o.seq IS NULL AND o.partition IS NULL
      AND (d.seen IS NULL OR NOT pg_visible_in_snapshot(o.txid, d.seen))
  ), ordered AS (
    SELECT f.p, f.id, f.ts,
           row_number() OVER (PARTITION BY f.p ORDER BY f.ts NULLS FIRST, f.txid, f.id) AS rn
    FROM fresh f
  ), marks AS (
    SELECT o.p, (o.rn - 1) / {MARKER_ROWS} AS chunk, array_agg(o.id ORDER BY o.rn) AS ids,
           array_agg(o.ts ORDER BY o.rn) AS times, min(o.id) AS lo, max(o.id) AS hi,
           max(o.ts) AS latest
    FROM ordered o
    GROUP BY o.p, (o.rn - 1) / {MARKER_ROWS}
  ), placed AS (
    SELECT m.*, d.drawn + sum(cardinality(m.ids)) OVER (ORDER BY m.p, m.chunk) AS last
    FROM marks m
  ), added AS (
    INSERT INTO outbox_commits (partition, first_seq, last_seq, base, txid, first_id, last_id,
                                committed_at, ids, times)
    SELECT p, last - cardinality(ids) + 1, last, last - cardinality(ids) + 1,
           pg_current_xact_id(), lo, hi, latest, ids, times
    FROM placed
    RETURNING last_seq, last_seq - first_seq + 1 AS rows_drawn
  )
  SELECT pg_current_snapshot(), coalesce((SELECT max(a.last_seq) FROM added a), d.drawn),
         (SELECT coalesce(sum(a.rows_drawn), 0) FROM added a)
  INTO snap, drawn, found_rows;
  IF found_rows > 0 THEN
    -- The commits drawn here are durable once this one is: its commit record follows theirs.
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;
  as_of := t;
  IF cleared AND d.check_vxids IS NOT NULL THEN
    -- Every row up to check_top was visible to the draw above, or rolled back.
    d.cursor := greatest(d.cursor, d.check_top);
    d.check_vxids := NULL;
    checks_moved := true;
  END IF;
  IF d.check_vxids IS NULL AND top > d.cursor
     AND (d.checked_at IS NULL OR t >= d.checked_at + interval '{CHECK_INTERVAL_MS} ms') THEN
    -- A new check: the ids issued so far, then who may still hold one of them unseen.
    d.check_top := top;
    d.checked_at := t;
    checks_moved := true;
    d.check_vxids := ARRAY(
      SELECT DISTINCT l.virtualtransaction FROM pg_locks l
      WHERE l.locktype = 'relation' AND l.relation = 'outbox'::regclass
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND l.mode = 'RowExclusiveLock' AND l.granted);
  END IF;
  IF found_rows > 0 OR checks_moved THEN
    UPDATE outbox_draws SET drawn = outbox_draw.drawn, cursor = d.cursor,
      seen = CASE WHEN found_rows > 0 THEN snap ELSE outbox_draws.seen END,
      as_of = t, check_top = d.check_top, check_vxids = d.check_vxids,
      checked_at = d.checked_at,
      drawn_at = CASE WHEN found_rows > 0 THEN now() ELSE outbox_draws.drawn_at END;
  ELSE
    -- Nothing placed, but every commit visible at t is: what a reader that does not draw
    -- vouches for (outbox_drawn_horizon_as_of) moves on.
    UPDATE outbox_draws SET as_of = t;
  END IF;
END
$$
"""

# What wakes `relay run`'s partitions (its commit watch, every 10 ms): a draw, then each
# partition's highest marker.
_COMMITTED_TOPS = """
CREATE FUNCTION outbox_committed_tops(parts integer[]) RETURNS TABLE (p integer, top bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  -- Draws first: call it in a transaction of its own, which commits the draw.
  PERFORM outbox_draw();
  RETURN QUERY
    SELECT s.p, (SELECT coalesce(max(c.last_seq), 0) FROM outbox_commits c
                 WHERE c.partition = s.p)
    FROM unnest(parts) s(p);
END
$$
"""

# The barrier of a count change whose rows are all published, cleared unless a count
# change holds the row: that change waits for the draw lock this transaction holds.
_CLEAR_BARRIER = """
CREATE FUNCTION outbox_clear_barrier(held bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM FROM outbox_settings WHERE barrier = held FOR UPDATE SKIP LOCKED;
  IF FOUND THEN
    UPDATE outbox_settings SET barrier = NULL WHERE barrier = held;
  END IF;
END
$$
"""

# The settled position given the highest one drawn: it, or a count change's barrier while
# rows of the old count wait.
_SETTLED = """
CREATE FUNCTION outbox_settled(drawn bigint) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  held bigint := (SELECT barrier FROM outbox_settings);
BEGIN
  IF held IS NOT NULL AND drawn > held THEN
    IF outbox_unpublished_up_to(held) THEN
      RETURN held;  -- rows of the old count first
    END IF;
    PERFORM outbox_clear_barrier(held);
  END IF;
  RETURN drawn;
END
$$
"""

# With the settled position, what it vouches for (heartbeats): the partition's highest
# position at or below it, the time as of which every commit visible then is at or below
# it (NULL while held at a barrier: commits above it are not published yet), and the
# relay partition count.
_VOUCHED = """
CREATE FUNCTION outbox_vouched(
  p integer, drawn bigint, drawn_as_of timestamptz,
  OUT horizon bigint, OUT top bigint, OUT as_of timestamptz, OUT partitions integer
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  horizon := outbox_settled(drawn);
  partitions := (SELECT s.partitions FROM outbox_settings s);
  IF horizon < drawn THEN
    RETURN;
  END IF;
  top := greatest(
    (SELECT max(m.last_seq) FROM outbox_commits m WHERE m.partition = p AND m.last_seq <= horizon),
    (SELECT max(o.seq) FROM outbox o
     WHERE o.partition = p AND o.seq IS NOT NULL AND o.seq <= horizon),
    0);
  as_of := drawn_as_of;
END
$$
"""

# Draw first (`relay run --once`, the Spark job, the CLI): call them in a transaction of
# their own, which commits the draw.
_HORIZON = """
CREATE OR REPLACE FUNCTION outbox_horizon(p integer) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT outbox_settled(d.drawn) FROM outbox_draw() d
$$
"""

_HORIZON_AS_OF = """
CREATE OR REPLACE FUNCTION outbox_horizon_as_of(
  p integer, OUT horizon bigint, OUT top bigint, OUT as_of timestamptz, OUT partitions integer
)
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT v.* FROM outbox_draw() d, outbox_vouched(p, d.drawn, d.as_of) v
$$
"""

# Without a draw, from what committed draws placed (`relay run`, whose commit watch draws
# every 10 ms). With no row above the draws' cursor, every commit visible now is drawn.
_DRAWN_HORIZON = """
CREATE FUNCTION outbox_drawn_horizon(p integer) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT outbox_settled(d.drawn) FROM outbox_draws d
$$
"""

_DRAWN_HORIZON_AS_OF = """
CREATE FUNCTION outbox_drawn_horizon_as_of(
  p integer, OUT horizon bigint, OUT top bigint, OUT as_of timestamptz, OUT partitions integer
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  t timestamptz := clock_timestamp();
  d outbox_draws%ROWTYPE;
BEGIN
  SELECT * INTO STRICT d FROM outbox_draws;
  IF (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_id_seq) <= d.cursor THEN
    d.as_of := t;
  END IF;
  SELECT * INTO horizon, top, as_of, partitions FROM outbox_vouched(p, d.drawn, d.as_of);
END
$$
"""

# Whether a row at or below position ``b`` is not published yet (above its partition's
# floor): rows sequenced before 0007 by their seq, later ones through their markers.
_UNPUBLISHED_UP_TO = """
CREATE OR REPLACE FUNCTION outbox_unpublished_up_to(b bigint) RETURNS boolean
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
        SELECT 1 FROM unnest(m.ids) WITH ORDINALITY u(id, k) JOIN outbox o ON o.id = u.id
        WHERE m.first_seq + u.k - 1 <= b AND m.first_seq + u.k - 1 > coalesce(f.position, 0)
      )
  )
$$
"""

_POSITIONS = """
CREATE VIEW outbox_positions AS
SELECT o.id, o.partition, o.seq AS position, o.topic, o.key, o.value, o.event_type,
       o.headers, o.created_at
FROM outbox o WHERE o.seq IS NOT NULL
UNION ALL
SELECT o.id, m.partition, m.first_seq + u.k - 1, o.topic, o.key, o.value, o.event_type,
       o.headers, o.created_at
FROM outbox_commits m
CROSS JOIN LATERAL unnest(m.ids) WITH ORDINALITY u(id, k)
JOIN outbox o ON o.id = u.id
"""

# Committed rows no draw has reached yet, each with the relay partition the next draw gives
# it (the count in force now): what `relay status` counts as pending besides the drawn.
_UNDRAWN = """
CREATE VIEW outbox_undrawn AS
SELECT o.id, CASE WHEN o.key IS NULL THEN (o.id % s.partitions)::integer
                  ELSE outbox_partition_of(o.key, s.partitions) END AS partition,
       o.topic, o.key, o.created_at
FROM outbox o CROSS JOIN outbox_draws d CROSS JOIN outbox_settings s
WHERE o.id > d.cursor AND o.seq IS NULL AND o.partition IS NULL
  AND (d.seen IS NULL OR NOT pg_visible_in_snapshot(o.txid, d.seen))
"""

_GUARD = f"""
CREATE OR REPLACE FUNCTION outbox_partition_count_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  pending bigint;
BEGIN
  IF NEW.partitions = OLD.partitions THEN
    RETURN NEW;
  END IF;
  -- Waits for a draw in progress, then draws what has committed with the old count; no
  -- other draw starts before this transaction ends, and the next one partitions with the
  -- new count.
  PERFORM pg_advisory_xact_lock({DRAW_LOCK_CLASS}, 0);
  PERFORM outbox_draw();
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
  NEW.barrier := CASE WHEN pending > 0 THEN (SELECT drawn FROM outbox_draws) END;
  RETURN NEW;
END
$$
"""

# The markers of transactions sequenced before this revision: each position's row id in
# ``ids`` (NULL where the row is gone: published, dead-lettered).
_MARKER_IDS = """
UPDATE outbox_commits m SET ids = ARRAY(
  SELECT o.id FROM generate_series(m.first_seq, m.last_seq) s(pos)
  LEFT JOIN outbox o ON o.id BETWEEN m.first_id AND m.last_id AND o.txid = m.txid
    AND o.partition = m.partition AND m.base + o.ordinal = s.pos
  ORDER BY s.pos)
"""

_GRANTS = """
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_relay') THEN
    GRANT SELECT ON outbox_draws, outbox_undrawn TO outbox_relay;
    GRANT EXECUTE ON FUNCTION outbox_draw() TO outbox_relay;
    GRANT EXECUTE ON FUNCTION outbox_committed_tops(integer[]) TO outbox_relay;
    GRANT EXECUTE ON FUNCTION outbox_horizon(integer), outbox_horizon_as_of(integer),
      outbox_drawn_horizon(integer), outbox_drawn_horizon_as_of(integer) TO outbox_relay;
  END IF;
END
$$
"""


def _earlier(filename: str) -> ModuleType:
    return load_sibling(__file__, filename)


def _or_replace(definition: str) -> str:
    return definition.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def upgrade() -> None:
    op.execute(_NEEDS_COMMIT_TIMESTAMPS)
    # Writers in flight finish first: every committed row has its marker.
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    op.execute("DROP TRIGGER outbox_sequence_at_commit ON outbox")
    op.execute("DROP TRIGGER outbox_capture_row ON outbox")
    op.execute("DROP FUNCTION outbox_sequence_at_commit()")
    op.execute("DROP FUNCTION outbox_capture_row()")
    op.execute("DROP FUNCTION outbox_capture_row_trigger(integer)")
    op.execute("ALTER TABLE outbox ALTER COLUMN partition DROP NOT NULL")
    op.execute("ALTER TABLE outbox ALTER COLUMN txid SET DEFAULT pg_current_xact_id()")
    op.execute(
        "ALTER TABLE outbox ADD CONSTRAINT outbox_written_plainly CHECK ("
        "txid = pg_current_xact_id() AND partition IS NULL AND ordinal IS NULL "
        "AND seq IS NULL) NOT VALID"
    )
    op.execute("ALTER TABLE outbox_commits ADD COLUMN ids bigint[], ADD COLUMN times timestamptz[]")
    op.execute(_MARKER_IDS)
    op.execute("ALTER TABLE outbox_commits ALTER COLUMN ids SET NOT NULL")
    op.execute(_DRAWS)
    op.execute(
        "INSERT INTO outbox_draws (drawn, cursor) SELECT "
        "(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_seq), "
        "(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_id_seq)"
    )
    op.execute(_DRAW)
    op.execute(_COMMITTED_TOPS)
    op.execute("DROP VIEW outbox_positions")
    op.execute(_POSITIONS)
    op.execute(_UNDRAWN)
    op.execute(_UNPUBLISHED_UP_TO)
    op.execute(_CLEAR_BARRIER)
    op.execute(_SETTLED)
    op.execute(_VOUCHED)
    op.execute("DROP FUNCTION outbox_horizon(integer)")
    op.execute(_HORIZON)
    op.execute("DROP FUNCTION outbox_horizon_as_of(integer)")
    op.execute(_HORIZON_AS_OF)
    op.execute(_DRAWN_HORIZON)
    op.execute(_DRAWN_HORIZON_AS_OF)
    op.execute(_GUARD)
    op.execute(_earlier("0007_commit_markers.py")._GRANTS)
    op.execute(_GRANTS)


def downgrade() -> None:
    markers = _earlier("0007_commit_markers.py")
    live_count = _earlier("0009_live_partition_count.py")
    freshness = _earlier("0010_mirror_freshness.py")
    serializable = _earlier("0014_serializable_capture.py")
    draws = _earlier("0015_contiguous_draws.py")
    single = _earlier("0016_shared_single_draws.py")
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    # No writer in flight, and no other draw: every committed row is drawn.
    op.execute(f"SELECT pg_advisory_xact_lock({DRAW_LOCK_CLASS}, 0)")
    op.execute("SELECT outbox_draw()")
    op.execute("ALTER TABLE outbox DROP CONSTRAINT outbox_written_plainly")
    # One marker per row waiting, as 0016 reads them: the row's own transaction id, its
    # partition, and ordinal 0 at base = its position.
    op.execute(
        """
        CREATE TEMPORARY TABLE drawn_rows ON COMMIT DROP AS
        SELECT m.partition, m.first_seq + u.k - 1 AS position, u.id,
               coalesce(u.at, m.committed_at) AS committed_at
        FROM outbox_commits m
        CROSS JOIN LATERAL unnest(m.ids, m.times) WITH ORDINALITY u(id, at, k)
        WHERE u.id IS NOT NULL
        """
    )
    op.execute("DELETE FROM outbox_commits")
    op.execute(
        """
        INSERT INTO outbox_commits
          (partition, first_seq, last_seq, base, txid, first_id, last_id, committed_at, ids)
        SELECT r.partition, r.position, r.position, r.position, o.txid, o.id, o.id,
               r.committed_at, ARRAY[o.id]
        FROM drawn_rows r JOIN outbox o ON o.id = r.id
        """
    )
    op.execute(
        """
        UPDATE outbox o SET partition = r.partition, ordinal = 0
        FROM drawn_rows r WHERE o.id = r.id
        """
    )
    op.execute("SELECT setval('outbox_seq', drawn) FROM outbox_draws WHERE drawn > 0")
    op.execute("DROP VIEW outbox_positions")
    op.execute(markers._POSITIONS)
    op.execute(_or_replace(live_count._UNPUBLISHED_UP_TO))
    op.execute("DROP FUNCTION outbox_drawn_horizon_as_of(integer)")
    op.execute("DROP FUNCTION outbox_drawn_horizon(integer)")
    op.execute("DROP FUNCTION outbox_horizon(integer)")
    op.execute(markers._HORIZON)
    op.execute(live_count._HORIZON)
    op.execute("DROP FUNCTION outbox_horizon_as_of(integer)")
    op.execute("DROP FUNCTION outbox_vouched(integer, bigint, timestamptz)")
    op.execute("DROP FUNCTION outbox_settled(bigint)")
    op.execute("DROP FUNCTION outbox_clear_barrier(bigint)")
    op.execute(freshness._HORIZON_AS_OF)
    op.execute("DROP VIEW outbox_undrawn")
    op.execute("DROP FUNCTION outbox_committed_tops(integer[])")
    op.execute("DROP FUNCTION outbox_draw()")
    op.execute("DROP TABLE outbox_draws")
    op.execute("ALTER TABLE outbox_commits DROP COLUMN ids, DROP COLUMN times")
    op.execute("ALTER TABLE outbox ALTER COLUMN txid DROP DEFAULT")
    op.execute("ALTER TABLE outbox ALTER COLUMN partition SET NOT NULL")
    op.execute(serializable._CAPTURE_ROW)
    op.execute(markers._CAPTURE_ROW_TRIGGER)
    op.execute(single._sequence_at_commit(draws))
    op.execute(
        """
        CREATE CONSTRAINT TRIGGER outbox_sequence_at_commit AFTER INSERT ON outbox
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
        WHEN (split_part(current_setting('outbox.pending', true), ':', 2) = NEW.id::text)
        EXECUTE FUNCTION outbox_sequence_at_commit()
        """
    )
    op.execute("SELECT outbox_capture_row_trigger(partitions) FROM outbox_settings")
    op.execute(live_count._GUARD)
    op.execute(markers._GRANTS)
    op.execute(freshness._GRANTS)
