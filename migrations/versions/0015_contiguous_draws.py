"""Each commit draws its positions as one block that no other commit's draws interleave.

Revision ID: 0015_contiguous_draws
Revises: 0014_serializable_capture
Create Date: 2026-11-27

``outbox_sequence_at_commit`` (0007, 0014) drew a span of n positions as n ``nextval``
calls and took ``[min, min + n - 1]`` as its own. Writers of different keys of one relay
partition hold its lock SHARED and commit at the same time, so their ``nextval`` calls
interleave: two markers then claimed the same positions. A commit could fail on
``outbox_commits``' primary key, a row could be published twice (a batch ending on a
lower position than a row it already held), or skipped (two rows at one position).

Now every draw, of one position or many, holds a session-level advisory lock
(``DRAW_LOCK_CLASS``) for the ``nextval`` calls only, and lets go before the marker is
written, also when the draw fails: commits of different keys still do not wait for each
other's WAL flush (what 0007 was for), only for each other's draws (microseconds).

Upgrade and downgrade lock the outbox (ACCESS EXCLUSIVE) so that no transaction in flight
is sequenced by the other version's function; rows, markers and positions are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from alembic import op

from relay.postgres.revision_files import load_sibling

revision: str = "0015_contiguous_draws"
down_revision: str | None = "0014_serializable_capture"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
oldest_compatible: str | None = "0011_outbox_stalls"

DRAW_LOCK_CLASS = 0x0B0D  # beside 0x0B0B (partitions) and 0x0B0C (keys)


def _serializable_capture() -> ModuleType:
    """0014_serializable_capture, whose function this one changes and the downgrade restores."""
    return load_sibling(__file__, "0014_serializable_capture.py")


def _guarded(draw: str) -> str:
    """``draw`` (PL/pgSQL statements) under the draw lock, released on every way out."""
    return (
        f"PERFORM pg_advisory_lock({DRAW_LOCK_CLASS}, 0);\n"
        "    BEGIN\n"
        f"    {draw}\n"
        "    EXCEPTION WHEN OTHERS OR query_canceled THEN\n"
        f"      PERFORM pg_advisory_unlock({DRAW_LOCK_CLASS}, 0);\n"
        "      RAISE;\n"
        "    END;\n"
        f"    PERFORM pg_advisory_unlock({DRAW_LOCK_CLASS}, 0);"
    )


_ONE_PARTITION = """IF pending[5] = '1' THEN
      first := nextval('outbox_seq');
    ELSE
      SELECT min(v) INTO first FROM (
        SELECT nextval('outbox_seq') AS v FROM generate_series(1, pending[5]::bigint)
      ) drawn;
    END IF;"""

_MANY_PARTITIONS_LOOP = (
    "  FOR part IN SELECT split_part(t, ':', 2)::integer AS p, "
    "split_part(t, ':', 3)::bigint AS low,"
)


def _sequence_at_commit(previous: str) -> str:
    if _ONE_PARTITION not in previous or _MANY_PARTITIONS_LOOP not in previous:
        raise RuntimeError("0014's outbox_sequence_at_commit is not as this migration expects")
    text = previous.replace(_ONE_PARTITION, _guarded(_ONE_PARTITION))
    # Several partitions: one lock around all of the partitions' draws; the markers are
    # written after it, from the spans kept in an array.
    head, loop = text.split(_MANY_PARTITIONS_LOOP)
    body, tail = loop.split("  RETURN NULL;\nEND", 1)
    draws = (
        "  spans := ARRAY[]::bigint[];\n  "
        + _guarded(
            "FOR part IN SELECT split_part(t, ':', 2)::integer AS p,\n"
            "                      split_part(t, ':', 3)::bigint AS low\n"
            "              FROM string_to_table(parts, ';') t WHERE split_part(t, ':', 1) = 'P'\n"
            "              ORDER BY 1 LOOP\n"
            "      SELECT min(v) INTO first FROM (\n"
            "        SELECT nextval('outbox_seq') AS v\n"
            "        FROM generate_series(part.low, pending[5]::bigint - 1)\n"
            "      ) drawn;\n"
            "      spans := spans || first;\n"
            "    END LOOP;"
        )
        + "\n"
    )
    markers = (
        "  i := 0;\n"
        + _MANY_PARTITIONS_LOOP
        + body.replace(
            """    SELECT min(v) INTO first FROM (
      SELECT nextval('outbox_seq') AS v FROM generate_series(part.low, pending[5]::bigint - 1)
    ) drawn;
""",
            "    i := i + 1;\n    first := spans[i];\n",
        )
    )
    text = head + draws + markers + "  RETURN NULL;\nEND" + tail
    return text.replace(
        "  first bigint;\nBEGIN", "  first bigint;\n  spans bigint[];\n  i integer;\nBEGIN", 1
    )


def upgrade() -> None:
    capture = _serializable_capture()
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    op.execute(_sequence_at_commit(capture._SEQUENCE_AT_COMMIT))


def downgrade() -> None:
    capture = _serializable_capture()
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    op.execute(capture._SEQUENCE_AT_COMMIT)
