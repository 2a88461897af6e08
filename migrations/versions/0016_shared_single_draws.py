"""A commit of one outbox row draws its position without waiting for other such commits.

Revision ID: 0016_shared_single_draws
Revises: 0015_contiguous_draws
Create Date: 2026-11-27

``0015_contiguous_draws`` made every draw of positions hold one session-level advisory
lock for its ``nextval`` calls, so that no commit's draws interleave another's block. A
single ``nextval`` is a block by itself: it only has to stay out of the blocks of
commits that draw several positions. Now a commit of one row holds that lock SHARED,
and a commit of several rows (one partition or more) holds it EXCLUSIVE as before; so
one-row commits, the common case, no longer queue behind each other on it (at 16
writers of one-row transactions 0015 cost a third of the write path's throughput).

Upgrade and downgrade lock the outbox (ACCESS EXCLUSIVE) so that no transaction in flight
is sequenced by the other version's function; rows, markers and positions are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from alembic import op

from relay.postgres.revision_files import load_sibling

revision: str = "0016_shared_single_draws"
down_revision: str | None = "0015_contiguous_draws"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
oldest_compatible: str | None = "0011_outbox_stalls"


def _contiguous_draws() -> ModuleType:
    """0015_contiguous_draws, whose function this one changes and the downgrade restores."""
    return load_sibling(__file__, "0015_contiguous_draws.py")


def _guarded(draw: str, lock_class: int, mode: str) -> str:
    """``draw`` under the draw lock in ``mode`` ("" exclusive, "_shared"), released on
    every way out."""
    return (
        f"PERFORM pg_advisory_lock{mode}({lock_class}, 0);\n"
        "      BEGIN\n"
        f"        {draw}\n"
        "      EXCEPTION WHEN OTHERS OR query_canceled THEN\n"
        f"        PERFORM pg_advisory_unlock{mode}({lock_class}, 0);\n"
        "        RAISE;\n"
        "      END;\n"
        f"      PERFORM pg_advisory_unlock{mode}({lock_class}, 0);"
    )


def _one_partition(lock_class: int) -> str:
    one = "first := nextval('outbox_seq');"
    several = (
        "SELECT min(v) INTO first FROM (\n"
        "          SELECT nextval('outbox_seq') AS v FROM generate_series(1, pending[5]::bigint)\n"
        "        ) drawn;"
    )
    return (
        "IF pending[5] = '1' THEN  -- one value is a block by itself\n"
        f"      {_guarded(one, lock_class, '_shared')}\n"
        "    ELSE\n"
        f"      {_guarded(several, lock_class, '')}\n"
        "    END IF;"
    )


def _sequence_at_commit(draws: ModuleType) -> str:
    previous = draws._sequence_at_commit(draws._serializable_capture()._SEQUENCE_AT_COMMIT)
    exclusive = draws._guarded(draws._ONE_PARTITION)
    if previous.count(exclusive) != 1:
        raise RuntimeError("0015's outbox_sequence_at_commit is not as this migration expects")
    return previous.replace(exclusive, _one_partition(draws.DRAW_LOCK_CLASS))


def upgrade() -> None:
    draws = _contiguous_draws()
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    op.execute(_sequence_at_commit(draws))


def downgrade() -> None:
    draws = _contiguous_draws()
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    op.execute(draws._sequence_at_commit(draws._serializable_capture()._SEQUENCE_AT_COMMIT))
