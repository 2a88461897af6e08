"""When a relay partition sends heartbeats, and the time each one may vouch for.

The outbox source tells, with each horizon it reads, what it vouches for
(:class:`~relay.publishing.types.Settled`: every row of the partition committed before
``as_of`` is at a position at or below ``top``). A heartbeat may say "complete through
``as_of``" in a Kafka transaction that commits a position at or above ``top``: the rows
it vouches for are then in that transaction or an earlier one, before the heartbeat in
each Kafka partition (docs/mirror.md, "Freshness"). A partition that has not caught up
with a fact keeps it pending, and vouches for the latest fact its position covers.

At most one heartbeat per interval, and only when the time moved on; none without
heartbeat topics.
"""

from __future__ import annotations

from collections.abc import Sequence

from relay.publishing.types import Settled
from relay.runtime.heartbeat import Heartbeat
from relay.settings.relay import HEARTBEAT_INTERVAL

DEFAULT_INTERVAL_S: float = HEARTBEAT_INTERVAL.default  # the setting's, declared once
_PENDING_KEPT = 16


class HeartbeatPlan:
    """The heartbeats of one relay partition."""

    def __init__(
        self,
        partition: int,
        database_id: str,
        topics: Sequence[str] = (),
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self.partition = partition
        self.topics = tuple(topics)
        self._database_id = database_id
        self._interval_s = interval_s
        self._pending: list[Settled] = []  # in as_of order, not yet covered by the position
        self._through: Settled | None = None  # the latest fact the position covers
        self._sent_ms = -1
        self._sent_at: float | None = None

    @property
    def complete_through_ms(self) -> int | None:
        """What the committed position vouches for (None: nothing yet)."""
        return None if self._through is None else self._through.as_of_ms

    def learnt(self, fact: Settled | None) -> None:
        """A fact the source established (the same one again changes nothing)."""
        if fact is None or not self.topics:
            return
        last = self._pending[-1] if self._pending else self._through
        if last is not None and fact.as_of_ms < last.as_of_ms:
            return
        if last is not None and fact.as_of_ms == last.as_of_ms:
            if fact.top >= last.top:
                return
            if self._pending:
                self._pending.pop()  # the same time, vouched for at a lower position
        self._pending.append(fact)
        del self._pending[:-_PENDING_KEPT]

    def covered(self, position: int) -> Settled | None:
        """The latest fact a committed ``position`` covers."""
        found = self._through
        for fact in self._pending:
            if fact.top <= position:
                found = fact
        return found

    def committed(self, position: int) -> None:
        """A transaction committed ``position``: the facts it covers are vouched for."""
        found = self.covered(position)
        if found is not None and found is not self._through:
            self._through = found
            self._pending = [f for f in self._pending if f.as_of_ms > found.as_of_ms]

    def due(self, now: float, position: int) -> Heartbeat | None:
        """The heartbeat for a transaction that commits ``position`` at ``now`` (the
        clock's monotonic time), or None when none is due."""
        if not self.topics:
            return None
        fact = self.covered(position)
        if fact is None or fact.as_of_ms <= self._sent_ms:
            return None
        if self._sent_at is not None and now - self._sent_at < self._interval_s:
            return None
        return Heartbeat(self._database_id, self.partition, fact.partitions, fact.as_of_ms)

    def sent(self, heartbeat: Heartbeat, now: float) -> None:
        """``heartbeat`` committed at ``now``."""
        self._sent_ms = heartbeat.complete_through_ms
        self._sent_at = now
