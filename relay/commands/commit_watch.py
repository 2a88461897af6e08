"""Waking `relay run`'s partitions when a transaction that wrote to them commits.

A watcher thread asks the database every ``interval_s`` (10 ms by default) for each relay
partition's highest committed marker (one index probe per partition, no cost on the
services' write path) and wakes the partitions whose marker moved. A partition with
nothing to publish waits for its wake-up or, as the fallback, for the poll interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from relay.errors import RetriableError

log = logging.getLogger(__name__)

Tops = Callable[[Sequence[int]], Mapping[int, int]]


class CommitWatch:
    """Wake-ups per relay partition, fed by :meth:`run` (a thread of its own)."""

    def __init__(
        self,
        partitions: Sequence[int],
        tops: Tops,
        interval_s: float,
        close: Callable[[], None] = lambda: None,
    ) -> None:
        """``close``: run when :meth:`run` ends (what ``tops`` keeps open)."""
        self._partitions = list(partitions)
        self._tops = tops
        self._close = close
        self._interval_s = interval_s
        self._wakeups = {p: threading.Event() for p in self._partitions}
        self._seen: dict[int, int] = {}

    def wait(self, partition: int, timeout: float) -> bool:
        """Until a transaction that wrote to ``partition`` commits (True), or ``timeout``."""
        wakeup = self._wakeups[partition]
        woken = wakeup.wait(timeout)
        wakeup.clear()
        return woken

    def pending(self, partition: int, position: int) -> bool:
        """Whether the last check saw a committed marker of ``partition`` above
        ``position`` (True before the first check)."""
        top = self._seen.get(partition)
        return top is None or top > position

    def wake_all(self) -> None:
        for wakeup in self._wakeups.values():
            wakeup.set()

    def check(self) -> list[int]:
        """Ask once; wake and return the partitions whose committed marker moved."""
        tops = self._tops(self._partitions)
        moved = [p for p, top in tops.items() if top > self._seen.get(p, 0)]
        self._seen.update(tops)
        for partition in moved:
            self._wakeups[partition].set()
        return moved

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(self._interval_s):
                try:
                    self.check()
                except RetriableError as exc:  # polling goes on meanwhile
                    log.debug("watching the outbox: %s", exc)
        finally:
            self._close()
            self.wake_all()
