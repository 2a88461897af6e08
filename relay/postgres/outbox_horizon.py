"""Each relay partition's horizon (0017_relay_drawn_positions): how far it is settled, and
what that vouches for (0010_mirror_freshness, for heartbeats); after a draw of what has
committed, or (`relay run`, whose commit watch draws) from what committed draws placed."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import Connection

from relay.postgres.prepared import DriverStatement
from relay.publishing.types import Settled

# How far the partition is settled, after a draw of what has committed since the last
# one: every position at or below it is committed and visible, or will never exist.
_HORIZON = DriverStatement("SELECT outbox_horizon(:partition), NULL, NULL, NULL")
_DRAWN_HORIZON = DriverStatement("SELECT outbox_drawn_horizon(:partition), NULL, NULL, NULL")
# With it, for heartbeats: the database time as of which that holds for every commit, the
# partition's highest position at or below it, and the relay partition count. Only a
# relay that sends heartbeats asks it. Milliseconds rounded down: a time rounded up could
# pass a commit made just after the draw's snapshot.
_HORIZON_AS_OF = DriverStatement(
    "SELECT horizon, top, floor(extract(epoch FROM as_of) * 1000)::int8, partitions "
    "FROM outbox_horizon_as_of(:partition)"
)
_DRAWN_HORIZON_AS_OF = DriverStatement(
    "SELECT horizon, top, floor(extract(epoch FROM as_of) * 1000)::int8, partitions "
    "FROM outbox_drawn_horizon_as_of(:partition)"
)


class Horizons:
    """The horizons an outbox source learnt, by relay partition; with ``settling``, also
    what each vouches for (:attr:`settled`). ``drawing``: draw before each read; without,
    something else draws (`relay run`'s commit watch, every few milliseconds)."""

    def __init__(self, *, settling: bool, drawing: bool = True) -> None:
        queries = {
            (False, True): _HORIZON,
            (True, True): _HORIZON_AS_OF,
            (False, False): _DRAWN_HORIZON,
            (True, False): _DRAWN_HORIZON_AS_OF,
        }
        self._query = queries[settling, drawing]
        self.settled: dict[int, Settled] = {}

    def read(self, conn: Connection, partition: int) -> int:
        """The partition's settled position; in a transaction of its own (``conn`` is in
        autocommit), which commits the draw it makes, if any."""
        ((found, top, as_of_ms, partitions),) = self._query.rows(conn, {"partition": partition})
        if as_of_ms is not None:
            self.settled[partition] = Settled(int(top), int(as_of_ms), int(partitions))
        return int(found)

    def drained(self, partition: int, position: int) -> None:
        """A fetch after ``position`` found nothing up to the last horizon read: what it
        vouches for is at or below ``position``."""
        found = self.settled.get(partition)
        if found is not None:
            self.settled[partition] = replace(found, top=min(found.top, position))
