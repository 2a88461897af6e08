"""The outbox's relay partitions: their count, changing it, rows stranded beyond it, and
the highest committed marker of each (what wakes `relay run`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import Connection, text

from relay.errors import ConfigurationError, RelayError
from relay.postgres.engine import Database
from relay.postgres.prepared import DriverStatement

log = logging.getLogger(__name__)

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
            text("SELECT count(*) FROM outbox_positions WHERE partition >= :n"), {"n": partitions}
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


# A draw of the positions of the transactions committed since the last one (0017), then
# each partition's highest marker.
_TOPS = DriverStatement("SELECT p, top FROM outbox_committed_tops(CAST(:partitions AS integer[]))")


class CommittedTops:
    """Per relay partition, the highest position of a committed transaction's marker (0
    when none), after a draw of what committed since the last one: one index probe each,
    asked every few milliseconds by `relay run`'s commit watch, on a connection of the
    pool it keeps until :meth:`close`.

    The statement goes to the driver as a prepared statement (:mod:`relay.postgres.prepared`),
    past SQLAlchemy's per-execution work: 140 µs of CPU a call instead of 500 µs, at 100
    calls a second."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._connection: Connection | None = None

    def __call__(self, partitions: Sequence[int]) -> dict[int, int]:
        doing = f"watching the outbox on {self._database.where}"
        try:
            with self._database.errors(doing, retriable=True):
                if self._connection is None:
                    self._connection = self._database.engine.connect().execution_options(
                        isolation_level="AUTOCOMMIT"  # no BEGIN, no ROLLBACK
                    )
                rows = _TOPS.rows(self._connection, {"partitions": list(partitions)})
        except RelayError:
            self.close()  # a new connection at the next call
            raise
        return {int(partition): int(top) for partition, top in rows}

    def close(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            try:
                connection.invalidate()  # its session state is the driver's, not the pool's
                connection.close()
            except Exception as exc:  # closing a broken connection
                log.debug("closing the commit watch's connection: %s", exc)
