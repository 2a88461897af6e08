"""Turning SIGTERM and SIGINT into a graceful stop of a long-running command."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("relay")


def stop_on_signals(stop: Callable[[], None], then: str = "finishing the current batch") -> None:
    """On SIGTERM or SIGINT, log ``received <signal>, <then>`` and call ``stop``."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, %s", signal.Signals(signum).name, then)
        stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def interrupt_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt, so that ``finally`` blocks clean up on the way out."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
