"""What a long-running process did, as one INFO line per interval.

`relay run` and `relay replicate` log each batch at DEBUG only; at INFO they log this
summary every ``every_s`` seconds while they publish (counts, transactions, and the seq
or offset range of each partition), and whatever is left when they stop. In JSON logs
the counts are fields of their own (``events``, ``transactions``, ``seconds``,
``ranges``).
"""

from __future__ import annotations

import logging
import threading

from relay.runtime.clock import Clock, SystemClock


class ActivityLog:
    """Batches added by any thread; one line per interval, by whichever thread adds or
    ticks when it is due."""

    def __init__(
        self,
        log: logging.Logger,
        verb: str,
        unit: str,
        position: str,
        *,
        every_s: float,
        clock: Clock | None = None,
    ) -> None:
        self._log = log
        self._verb, self._unit, self._position = verb, unit, position
        self._every_s = every_s
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._since = self._clock.monotonic()
        self._count = 0
        self._transactions = 0
        self._ranges: dict[str, list[int]] = {}

    def add(self, where: str, count: int, first: int, last: int) -> None:
        """One committed batch of ``count`` records, ``first..last``, at ``where`` (a
        partition's short name, e.g. ``p3`` or ``topic[3]``); logs if due."""
        with self._lock:
            self._count += count
            self._transactions += 1
            span = self._ranges.setdefault(where, [first, last])
            span[0], span[1] = min(span[0], first), max(span[1], last)
        self.tick()

    def tick(self) -> None:
        """Log the summary if the interval has passed and something was done in it."""
        if self._clock.monotonic() - self._since >= self._every_s:
            self.flush()

    def flush(self) -> None:
        """Log what was done since the last line, if anything (e.g. when stopping)."""
        with self._lock:
            now = self._clock.monotonic()
            if not self._transactions:
                return
            seconds = round(now - self._since, 1)
            count, transactions, ranges = self._count, self._transactions, self._ranges
            self._since, self._count, self._transactions, self._ranges = now, 0, 0, {}
        shown = ", ".join(
            f"{where}: {self._position} {span[0]}..{span[1]}" for where, span in ranges.items()
        )
        self._log.info(
            "%s %d %s in %d transactions in the last %.0f s (%s)",
            self._verb,
            count,
            self._unit,
            transactions,
            seconds,
            shown,
            extra={
                self._unit: count,
                "transactions": transactions,
                "seconds": seconds,
                "ranges": ranges,
            },
        )
