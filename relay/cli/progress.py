"""Showing a ``--once`` run's progress: a live bar when stderr is a terminal, else a log
line every ``--progress-interval`` (relay.runtime.progress)."""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext

from relay.runtime.progress import Progress, reporting


def showing(
    progress: Progress | None, what: str, interval_s: float, unit: str = "rows"
) -> AbstractContextManager[None]:
    """Show ``progress`` (None: nothing) while the block runs, counted in ``unit``."""
    if progress is None:
        return nullcontext()
    return reporting(
        progress, what, interactive=sys.stderr.isatty(), interval_s=interval_s, unit=unit
    )
