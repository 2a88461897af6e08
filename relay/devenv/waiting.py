"""``wait_until``: the one way tests, benchmarks and the chaos tools wait for a condition."""

from __future__ import annotations

from collections.abc import Callable

from relay.runtime.clock import Clock, SystemClock
from relay.runtime.clock import wait_until as poll_until


def wait_until(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    explain: Callable[[], str] | None = None,
    *,
    interval: float = 0.05,
    clock: Clock | None = None,
) -> None:
    """Check ``condition`` every ``interval`` seconds until it holds; after ``timeout``
    seconds raise :class:`TimeoutError` naming ``what`` (and what ``explain`` returns then,
    e.g. a process's log)."""
    if not poll_until(condition, timeout, clock=clock or SystemClock(), interval=interval):
        details = f"\n{explain()}" if explain is not None else ""
        raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}{details}")
