"""Progress of a run that is meant to finish (``relay run --once``, ``relay mirror --once``,
the Spark jobs): rows done, the rate and the ETA.

:class:`Progress` counts (thread-safe, on an injected clock); :func:`reporting` shows it
while a block runs: on a terminal a live progress bar (rich) on stderr, otherwise one log
line every ``interval_s`` seconds (``relay.progress``, with the numbers as structured
fields in ``--log-format json``). The counts come from observers
(:mod:`relay.runtime.observed`), never from the cores themselves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.text import Text

from relay.runtime.clock import Clock, SystemClock

log = logging.getLogger("relay.progress")

DEFAULT_INTERVAL_S = 10.0  # RELAY_PROGRESS_INTERVAL_S
LIVE_REFRESH_S = 0.5  # how often a live bar takes the counts


@dataclass(frozen=True, slots=True)
class Snapshot:
    done: int  # rows (records) done: published or applied, and dead-lettered
    dead_letters: int  # of ``done``, the rows moved to the dead letters
    total: int | None  # rows to do, as known so far (None: not known)
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Rows a second since the start."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds until ``total`` at the rate so far (None: no total, or no rate yet)."""
        if self.total is None or self.rate <= 0:
            return None
        return max(0, self.total - self.done) / self.rate

    def line(self, unit: str) -> str:
        """E.g. ``12,000 of 50,000 rows (24%), 3,400 rows/s, ETA 0:00:11``."""
        if self.total is None:
            counted = f"{self.done:,} {unit}"
        else:
            share = 100.0 * self.done / self.total if self.total else 100.0
            counted = f"{self.done:,} of {self.total:,} {unit} ({share:.0f}%)"
        dead = f", {self.dead_letters:,} dead-lettered" if self.dead_letters else ""
        eta = "-" if self.eta_s is None else _clock_time(self.eta_s)
        return f"{counted}{dead}, {_rate(self.rate)} {unit}/s, ETA {eta}"

    def fields(self) -> dict[str, object]:
        """The numbers as a log record's structured fields."""
        return {
            "rows_done": self.done,
            "rows_total": self.total,
            "dead_letters": self.dead_letters,
            "rate_per_s": round(self.rate, 1),
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
            "elapsed_s": round(self.elapsed_s, 1),
        }


def _rate(per_second: float) -> str:
    return f"{per_second:,.0f}" if per_second >= 10 or per_second == 0 else f"{per_second:.2f}"


def _clock_time(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class Progress:
    """Rows done against a total that grows as the parts of the run report theirs."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._started = self._clock.monotonic()
        self._done = self._dead = 0
        self._total: int | None = None

    def restart(self) -> None:
        """The rate counts from now (e.g. once the start-up checks passed)."""
        with self._lock:
            self._started = self._clock.monotonic()

    def add_total(self, rows: int) -> None:
        with self._lock:
            self._total = (self._total or 0) + rows

    def advance(self, rows: int, *, dead_letters: int = 0) -> None:
        with self._lock:
            self._done += rows + dead_letters
            self._dead += dead_letters

    def snapshot(self) -> Snapshot:
        with self._lock:
            done, dead, total, started = self._done, self._dead, self._total, self._started
        elapsed = self._clock.monotonic() - started
        # Rows committed after a part's count was taken: never more done than to do.
        return Snapshot(done, dead, None if total is None else max(total, done), elapsed)


class Display(Protocol):
    def show(self, snapshot: Snapshot) -> None: ...

    def close(self, snapshot: Snapshot) -> None: ...


class LogLines:
    """One ``relay.progress`` log line per report and one at the end, the numbers also as
    fields."""

    def __init__(self, what: str, unit: str = "rows") -> None:
        self._what = what
        self._unit = unit

    def show(self, snapshot: Snapshot) -> None:
        log.info("%s: %s", self._what, snapshot.line(self._unit), extra=snapshot.fields())

    def close(self, snapshot: Snapshot) -> None:
        self.show(snapshot)  # the last line: where the run ended


class _RateColumn(ProgressColumn):
    def __init__(self, unit: str) -> None:
        super().__init__()
        self._unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-" if speed is None else f"{_rate(speed)} {self._unit}/s")


class LiveBar:
    """A rich progress bar on stderr: rows, share, rate, elapsed time and ETA."""

    def __init__(self, what: str, unit: str = "rows", console: Console | None = None) -> None:
        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            _RateColumn(unit),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console or Console(stderr=True),
            refresh_per_second=4,
        )
        self._task = self._bar.add_task(what, total=None)
        self._bar.start()

    def show(self, snapshot: Snapshot) -> None:
        self._bar.update(self._task, completed=snapshot.done, total=snapshot.total)

    def close(self, snapshot: Snapshot) -> None:
        self.show(snapshot)
        self._bar.stop()


class Reporter:
    """Shows ``progress`` on ``display`` every ``interval_s`` until stopped."""

    def __init__(
        self, progress: Progress, display: Display, interval_s: float, clock: Clock
    ) -> None:
        self._progress = progress
        self._display = display
        self._interval_s = interval_s
        self._clock = clock

    def report(self) -> None:
        snapshot = self._progress.snapshot()
        if snapshot.total is not None or snapshot.done:  # not before the work starts
            self._display.show(snapshot)

    def run(self, stop: threading.Event) -> None:
        while not self._clock.wait(self._interval_s, stop):
            self.report()

    def close(self) -> None:
        self._display.close(self._progress.snapshot())


@contextmanager
def reporting(
    progress: Progress,
    what: str,
    *,
    interactive: bool,
    interval_s: float = DEFAULT_INTERVAL_S,
    unit: str = "rows",
    clock: Clock | None = None,
) -> Iterator[None]:
    """Show ``progress`` while the block runs: a live bar when ``interactive`` (stderr is a
    terminal), else a log line every ``interval_s``."""
    display: Display = LiveBar(what, unit) if interactive else LogLines(what, unit)
    every = min(interval_s, LIVE_REFRESH_S) if interactive else interval_s
    reporter = Reporter(progress, display, every, clock or SystemClock())
    stop = threading.Event()
    thread = threading.Thread(target=reporter.run, args=(stop,), name="relay-progress")
    thread.daemon = True
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        reporter.close()
