"""The draws' cursor moves at the check that finds no writer in flight; pending rows not
drawn yet are counted from the cursor up.

Revision ID: 0018_prompt_draw_cursor
Revises: 0017_relay_drawn_positions
Create Date: 2026-11-27

``0017_relay_drawn_positions`` checked who held the outbox's RowExclusiveLock after a
draw's fresh rows were read, so its cursor moved at the next check at the earliest: the
first two draws of a backlog each read every row of it. Now a draw checks before it reads:
the ids issued so far (read first), then the holders of the lock. An INSERT takes that
lock before its row takes an id, and a transaction releases its locks after its commit
is visible; so when no transaction holds it, every row up to those ids is visible to the
draw's read that follows, or rolled back, and the cursor moves past them with this draw.
While some hold it, the check waits for them to end as before.

The draw also sorts each partition's rows once instead of three times (``_MARKS``).

``outbox_undrawn`` (`relay status`, and the total of a `relay run --once` progress) joined
the outbox to ``outbox_draws`` and ``outbox_settings``: the planner computed every row's
relay partition, hashing its key, before it compared the row's id with the cursor (470 ms
per partition for 400,000 rows, drawn or not). It reads them as scalar subqueries now,
and the rows above the cursor through the primary key.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from alembic import op

from relay.postgres.revision_files import load_sibling

revision: str = "0018_prompt_draw_cursor"
down_revision: str | None = "0017_relay_drawn_positions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
oldest_compatible: str | None = "0017_relay_drawn_positions"

_UNDRAWN = """
CREATE OR REPLACE VIEW outbox_undrawn AS
SELECT o.id,
       CASE WHEN o.key IS NULL
            THEN (o.id % (SELECT s.partitions FROM outbox_settings s))::integer
            ELSE outbox_partition_of(o.key, (SELECT s.partitions FROM outbox_settings s))
       END AS partition,
       o.topic, o.key, o.created_at
FROM outbox o
WHERE o.id > (SELECT d.cursor FROM outbox_draws d) AND o.seq IS NULL AND o.partition IS NULL
  AND NOT coalesce(pg_visible_in_snapshot(o.txid, (SELECT d.seen FROM outbox_draws d)), false)
"""

_CLEARED = """
  cleared := d.check_vxids IS NULL OR NOT EXISTS (
    SELECT FROM pg_locks l WHERE l.virtualtransaction = ANY(d.check_vxids));
"""
_CHECK_BEFORE = """
  moved_to := d.cursor;  -- the read of fresh rows below starts above d.cursor
  IF d.check_vxids IS NOT NULL AND NOT EXISTS (
       SELECT FROM pg_locks l WHERE l.virtualtransaction = ANY(d.check_vxids)) THEN
    -- Every holder at the last check has ended: each row up to check_top is visible to
    -- the read below, or rolled back.
    moved_to := greatest(moved_to, d.check_top);
    d.check_vxids := NULL;
    checks_moved := true;
  END IF;
  IF d.check_vxids IS NULL AND top > moved_to
     AND (d.checked_at IS NULL OR t >= d.checked_at + interval '{interval} ms') THEN
    -- A check: the ids issued so far (top, read above), then who may still hold one of
    -- them unseen (an INSERT holds the lock before its row takes an id).
    d.checked_at := t;
    checks_moved := true;
    d.check_vxids := {holders}
    IF cardinality(d.check_vxids) = 0 THEN
      -- None: each row up to top is visible to the read below, or rolled back.
      moved_to := top;
      d.check_vxids := NULL;
    ELSE
      d.check_top := top;
    END IF;
  END IF;
"""


def _drawn_positions() -> ModuleType:
    """0017_relay_drawn_positions, whose draw and view this one changes (the downgrade
    restores them)."""
    return load_sibling(__file__, "0017_relay_drawn_positions.py")


def _replaced(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise RuntimeError("0017's outbox_draw is not as this migration expects")
    return text.replace(old, new)


def _between(text: str, start: str, end: str) -> str:
    """The part of ``text`` from ``start`` up to ``end``."""
    if text.count(start) != 1 or text.count(end) != 1:
        raise RuntimeError("0017's outbox_draw is not as this migration expects")
    return text[text.index(start) : text.index(end)]


# 0017 numbered each partition's rows (a sort of every row drawn), then sorted them again
# by marker and once more inside each marker's two aggregates. Now one aggregate per
# partition sorts its ids; the times, sorted alone, are the same array (the order is by
# commit time first); markers are slices of these.
_MARKS = """  ), drawn_rows AS (
    SELECT f.p, array_agg(f.id ORDER BY f.ts NULLS FIRST, f.txid, f.id) AS ids,
           array_agg(f.ts ORDER BY f.ts NULLS FIRST) AS times
    FROM fresh f
    GROUP BY f.p
  ), marks AS (
    SELECT r.p, c.chunk, s.ids, s.times, (SELECT min(i) FROM unnest(s.ids) i) AS lo,
           (SELECT max(i) FROM unnest(s.ids) i) AS hi, s.times[cardinality(s.times)] AS latest
    FROM drawn_rows r
    CROSS JOIN LATERAL generate_series(0, (cardinality(r.ids) - 1) / {rows}) c(chunk)
    CROSS JOIN LATERAL (
      SELECT r.ids[c.chunk * {rows} + 1 : (c.chunk + 1) * {rows}] AS ids,
             r.times[c.chunk * {rows} + 1 : (c.chunk + 1) * {rows}] AS times
    ) s
  ), placed AS ("""


def _draw(drawn: ModuleType) -> str:
    """0017's draw, with its check made before the read of fresh rows instead of after,
    and one sort per partition."""
    text = drawn._DRAW.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    check_after = _between(text, "  IF cleared AND", "  IF found_rows > 0 OR checks_moved")
    i = check_after.index("ARRAY(")
    holders = check_after[i : check_after.index(";\n", i) + 1]  # who holds the outbox
    check_before = _CHECK_BEFORE.replace("{interval}", str(drawn.CHECK_INTERVAL_MS))
    text = _replaced(text, "  cleared boolean;\n", "  moved_to bigint;\n")
    text = _replaced(text, _CLEARED, check_before.replace("{holders}", holders))
    text = _replaced(text, check_after, "")
    marks = _between(text, "  ), ordered AS (", "  ), placed AS (") + "  ), placed AS ("
    text = _replaced(text, marks, _MARKS.replace("{rows}", str(drawn.MARKER_ROWS)))
    return _replaced(text, "cursor = d.cursor,", "cursor = moved_to,")


def upgrade() -> None:
    op.execute(_draw(_drawn_positions()))
    op.execute(_UNDRAWN)


def downgrade() -> None:
    drawn = _drawn_positions()
    op.execute(drawn._DRAW.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    op.execute(drawn._UNDRAWN.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
