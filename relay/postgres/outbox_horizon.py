"""Each relay partition's horizon (0007_commit_markers): how far it is settled, what that
vouches for (0010_mirror_freshness, for heartbeats), and who holds it up."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from sqlalchemy import Connection, text

from relay.postgres.prepared import DriverStatement
from relay.publishing.types import Settled

# How far the partition is settled: every position at or below it is committed and
# visible, or will never exist. NULL when a writer that does not finish holds it up.
_HORIZON = DriverStatement("SELECT outbox_horizon(:partition), NULL, NULL, NULL")
# With it, for heartbeats: the database time as of which that holds for every commit, the
# partition's highest position at or below it, and the relay partition count. About a
# third slower (0.1-0.2 ms); only a relay that sends heartbeats asks it. Milliseconds
# rounded down: a time rounded up could pass a commit made just after the lock was let go.
_HORIZON_AS_OF = DriverStatement(
    "SELECT horizon, top, floor(extract(epoch FROM as_of) * 1000)::int8, partitions "
    "FROM outbox_horizon_as_of(:partition)"
)
HORIZON_BLOCKERS = text(
    """
    SELECT coalesce('prepared transaction ' || quote_literal(x.gid),
                    'backend ' || l.pid || coalesce(' (' || a.state || ' since '
                    || date_trunc('second', a.state_change) || ')', ''))
    FROM pg_locks l
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    LEFT JOIN pg_prepared_xacts x ON l.virtualtransaction = '-1/' || x.transaction
    WHERE l.locktype = 'advisory' AND l.classid = 2827 AND l.objid = :partition
      AND l.objsubid = 2 AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    """
)
HELD_UP_WARNING_S = 10.0
"""How long a partition's horizon may be held up before each warning."""

log = logging.getLogger(__name__)


class Horizons:
    """The horizons an outbox source learnt, by relay partition; with ``settling``, also
    what each vouches for (:attr:`settled`)."""

    def __init__(self, *, held_up_warning_s: float, settling: bool) -> None:
        self._query = _HORIZON_AS_OF if settling else _HORIZON
        self._held_up_warning_s = held_up_warning_s
        self._learnt: dict[int, int] = {}
        self._held_up_since: dict[int, float] = {}
        self.settled: dict[int, Settled] = {}

    def read(self, conn: Connection, partition: int) -> int:
        """The partition's settled position, or the last one learnt when a writer holds
        it up; in a transaction of its own (``conn`` is in autocommit), which releases the
        partition's lock at once."""
        ((found, top, as_of_ms, partitions),) = self._query.rows(conn, {"partition": partition})
        if found is not None:
            self._learnt[partition] = int(found)
            self._held_up_since.pop(partition, None)
            if as_of_ms is not None:
                self.settled[partition] = Settled(int(top), int(as_of_ms), int(partitions))
            return int(found)
        now = time.monotonic()
        since = self._held_up_since.setdefault(partition, now)
        if now - since >= self._held_up_warning_s:
            blockers = conn.execute(HORIZON_BLOCKERS, {"partition": partition}).scalars()
            conn.commit()
            log.warning(
                "relay partition %d: publishing is held up for %.0f s by a transaction that "
                "wrote to it and does not finish: %s (commit or roll it back; "
                "docs/operations.md)",
                partition,
                now - since,
                ", ".join(blockers) or "unknown",
            )
            self._held_up_since[partition] = now
        return self._learnt.get(partition, 0)

    def drained(self, partition: int, position: int) -> None:
        """A fetch after ``position`` found nothing up to the last horizon read: what it
        vouches for is at or below ``position``."""
        found = self.settled.get(partition)
        if found is not None:
            self.settled[partition] = replace(found, top=min(found.top, position))
