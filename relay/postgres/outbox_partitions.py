"""The outbox's relay partitions: their count, changing it, rows stranded beyond it, and
the highest committed marker of each (what wakes `relay run`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import text

from relay.errors import ConfigurationError
from relay.postgres.engine import Database

_PARTITIONS = text("SELECT partitions FROM outbox_settings")


def relay_partitions(database: Database) -> int:
    """How many relay partitions the outbox has (outbox_settings)."""
    with database.connect("reading outbox_settings") as conn:
        return int(conn.execute(_PARTITIONS).scalar_one())


def stranded_rows(database: Database, partitions: int) -> int:
    """Rows in relay partitions at or beyond ``partitions``: they would never be
    published (the count was lowered past the guard, e.g. by an older release)."""
    with database.connect("reading the outbox") as conn:
        found = conn.execute(
            text("SELECT count(*) FROM outbox WHERE partition >= :n"), {"n": partitions}
        )
        return int(found.scalar_one())


class CountChange(NamedTuple):
    before: int
    barrier: int | None  # rows above it wait for every row up to it (None: nothing pending)


def change_partition_count(database: Database, partitions: int) -> CountChange:
    """Set ``outbox_settings.partitions`` (``outbox_partition_count_guard``): raising it
    with rows pending sets the barrier; lowering it, or a second change before the rows
    of the first are published, is refused while rows wait."""
    if not 1 <= partitions <= 4096:
        raise ConfigurationError(f"the relay partition count must be 1..4096, got {partitions}")
    with database.begin("changing the relay partition count") as conn:
        before = int(
            conn.execute(text("SELECT partitions FROM outbox_settings FOR UPDATE")).scalar_one()
        )
        barrier = conn.execute(
            text("UPDATE outbox_settings SET partitions = :n RETURNING barrier"), {"n": partitions}
        ).scalar_one()
    return CountChange(before, None if barrier is None else int(barrier))


_TOPS = text(
    """
    SELECT s.p AS partition,
           (SELECT coalesce(max(c.last_seq), 0) FROM outbox_commits c WHERE c.partition = s.p)
             AS top
    FROM unnest(CAST(:partitions AS integer[])) AS s(p)
    """
)


def committed_tops(database: Database, partitions: Sequence[int]) -> dict[int, int]:
    """Per relay partition, the highest position of a committed transaction's marker
    (0 when none): one index probe each, cheap enough to ask every few milliseconds."""
    with database.connect("watching the outbox", retriable=True) as conn:
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")  # no BEGIN, ROLLBACK
        rows = autocommit.execute(_TOPS, {"partitions": list(partitions)}).all()
    return {int(row.partition): int(row.top) for row in rows}
