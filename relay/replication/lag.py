"""How far behind each replicated partition is, for `relay replicate --lag`: in source
offsets, and in seconds from the time its copy is complete through."""

from __future__ import annotations

from dataclasses import dataclass

from relay.replication.types import ReplicaPosition, Route

CAUGHT_UP = "caught up"  # nothing a read_committed consumer of the source sees is left
HEARTBEAT = "heartbeat"  # the position's complete-through time (--heartbeat-interval)
OLDEST_RECORD = "oldest record"  # the timestamp of the first record not copied yet
NO_POSITION = "no position"
GONE = "position not in the source log"


@dataclass(frozen=True, slots=True)
class RouteLag:
    """One source partition: its last stable offset (``source_end``), its position on
    the target (None: none), and ``seconds``: this host's clock minus the time its copy is
    complete through, which ``basis`` names (None: unknown)."""

    route: Route
    source_end: int
    position: int | None
    seconds: float | None
    basis: str

    @property
    def records_behind(self) -> int:
        """Source offsets between the position and the end (markers and aborted records
        count, as in relay_replicate_lag_records)."""
        return max(0, self.source_end - (self.position or 0))


def route_lag(
    route: Route,
    source_end: int,
    position: ReplicaPosition,
    first_uncopied_ms: int | None,
    now: float,
    *,
    in_log: bool = True,
) -> RouteLag:
    """``first_uncopied_ms``: the timestamp of the first committed source record at or
    after the position (None: none before the end); ``in_log``: False when the position is
    below the source's first offset; ``now``: seconds since the epoch.

    A record becomes visible no earlier than its timestamp (CreateTime is taken before it
    is sent, LogAppendTime when it is appended), and a record at a higher offset never
    becomes visible before it; so the copy is complete through at least that timestamp,
    and through the position's own time (``as_of``) too: the later of the two counts."""
    if not position.exists:
        return RouteLag(route, source_end, None, None, NO_POSITION)
    at = position.next_offset
    if at >= source_end or (in_log and first_uncopied_ms is None):
        return RouteLag(route, source_end, at, 0.0, CAUGHT_UP)
    as_of = None if position.stamp is None else position.stamp.as_of_ms
    oldest = first_uncopied_ms if in_log else None
    known = [(ms, why) for ms, why in ((as_of, HEARTBEAT), (oldest, OLDEST_RECORD)) if ms]
    if not known:
        return RouteLag(route, source_end, at, None, GONE)
    through_ms, basis = max(known)
    return RouteLag(route, source_end, at, max(0.0, now - through_ms / 1000), basis)
