"""The time a replicated partition is complete through: every record that a
``read_committed`` consumer of the source partition could see at time T is copied.

Every ``--heartbeat-interval`` seconds a partition takes a *probe*: the wall time T, then
the source partition's last stable offset L (asked after T, so every record visible at T
lies below L: a last stable offset never goes back). Once everything below L is copied or
skipped (aborted records, transaction markers), the partition is complete through T. The
probe needs no record on the source, so an idle source stays fresh; under load it is
settled by the batch that passes L, whose position (the offset's stamp on the target)
carries T (``as_of``), committed with the copies. One probe is pending at a time: a new
one is taken only after the last one is settled, so that a busy partition's time moves
(a newer probe would always be ahead of the copies).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from relay.errors import RelayError
from relay.replication.types import PositionStamp
from relay.runtime.clock import Clock

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Probe:
    as_of_ms: int  # the wall time taken before the source's end was asked
    end: int  # the source partition's last stable offset, asked after as_of_ms


class Freshness:
    """One source partition's probes; ``every_s`` 0: none are taken."""

    def __init__(self, every_s: float, clock: Clock, wall: Callable[[], float]) -> None:
        self._every_s = every_s
        self._clock = clock
        self._wall = wall
        self._pending: Probe | None = None
        self._probed_at: float | None = None

    def probe_if_due(self, source_end: Callable[[], int], where: object) -> None:
        """Take a probe when none is pending and the last one is ``every_s`` old. A failed
        read of the source's end only skips this probe (the copy itself goes on)."""
        if self._every_s <= 0 or self._pending is not None:
            return
        now = self._clock.monotonic()
        if self._probed_at is not None and now - self._probed_at < self._every_s:
            return
        self._probed_at = now
        as_of_ms = int(self._wall() * 1000)
        try:
            end = source_end()
        except RelayError as exc:
            log.debug("%s: reading the source's end for the heartbeat failed: %s", where, exc)
            return
        self._pending = Probe(as_of_ms, end)

    def covered(self, done_below: int) -> int | None:
        """The pending probe's time when everything below ``done_below`` being copied or
        skipped settles it (not settled yet: see :meth:`settle`); else None."""
        pending = self._pending
        return pending.as_of_ms if pending is not None and done_below >= pending.end else None

    def stamped(self, stamp: PositionStamp, done_below: int) -> PositionStamp:
        """``stamp`` with the pending probe's time when everything below ``done_below``
        being copied or skipped settles it; ``stamp`` itself otherwise."""
        as_of = self.covered(done_below)
        return stamp if as_of is None else replace(stamp, as_of_ms=as_of)

    def settle(self) -> None:
        """The pending probe's time is vouched for (committed, or nothing was left to copy)."""
        self._pending = None
