"""Time and deadlines, passed into the cores rather than read from globals."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wait(self, seconds: float, stop: threading.Event | None = None) -> bool:
        """Wait ``seconds`` or until ``stop`` is set; True when stopped."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is None:
            time.sleep(seconds)
            return False
        return stop.wait(seconds)


class Deadline:
    """One time budget shared by several calls (start-up checks, shutdown)."""

    __slots__ = ("_clock", "_ends_at", "timeout")

    def __init__(self, timeout: float, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self.timeout = timeout
        self._ends_at = self._clock.monotonic() + timeout

    def remaining(self) -> float:
        return max(0.0, self._ends_at - self._clock.monotonic())

    def expired(self) -> bool:
        return self.remaining() <= 0.0


def wait_until(
    cond: Callable[[], bool],
    timeout: float,
    *,
    clock: Clock | None = None,
    interval: float = 0.1,
) -> bool:
    """Poll ``cond`` every ``interval`` seconds until it is true (returns True) or
    ``timeout`` seconds have passed (False). ``cond`` is checked at least once."""
    clock = clock or SystemClock()
    deadline = Deadline(timeout, clock)
    while not cond():
        if deadline.expired():
            return False
        clock.wait(interval)
    return True
