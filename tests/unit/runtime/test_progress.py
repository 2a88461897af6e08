"""Progress of --once runs and the Spark jobs: counts, rate and ETA from the observers'
events, as a log line every interval when stderr is not a terminal, or a live bar."""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Mapping
from types import SimpleNamespace

import pytest
from rich.console import Console

from relay.errors import DatabaseError
from relay.runtime.metrics import Backlog
from relay.runtime.observed import (
    MirrorProgressMetrics,
    OutboxProgressMetrics,
    ReplicaProgressMetrics,
)
from relay.runtime.progress import LiveBar, LogLines, Progress, Reporter
from relay.spark import completed_tasks
from tests.fakes.publishing import FakeClock


class StoppingClock(FakeClock):
    """Each wait moves time on by its length; the ``waits``-th one reports a stop."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self._left = waits

    def wait(self, seconds: float, stop: threading.Event | None = None) -> bool:
        super().wait(seconds, stop)
        self._left -= 1
        return self._left <= 0


def _pending(found: dict[int, int]) -> object:
    def backlog(positions: Mapping[int, int]) -> dict[int, Backlog]:
        return {p: Backlog(found[p], 0) for p in positions}

    return backlog


def test_a_run_logs_rows_rate_and_eta_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = StoppingClock(waits=3)
    metrics = OutboxProgressMetrics(Progress(clock), clock=clock)
    metrics.expect([0, 1], _pending({0: 600, 1: 400}))  # type: ignore[arg-type]
    metrics.running(0, 100)
    metrics.running(1, 0)
    metrics.running(0, 300)  # after a batch: not counted again
    metrics.published(0, 200, 0.1)
    metrics.published(1, 50, 0.1)
    metrics.dead_lettered(1, 50)

    reporter = Reporter(metrics.progress, LogLines("published"), 10.0, clock)
    with caplog.at_level(logging.INFO, logger="relay.progress"):
        reporter.run(threading.Event())  # two lines, then the clock says stop
        metrics.published(0, 300, 0.1)
        reporter.close()  # the last line

    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "published: 300 of 1,000 rows (30%), 50 dead-lettered, 30 rows/s, ETA 0:00:23",
        "published: 300 of 1,000 rows (30%), 50 dead-lettered, 15 rows/s, ETA 0:00:47",
        "published: 600 of 1,000 rows (60%), 50 dead-lettered, 20 rows/s, ETA 0:00:20",
    ]
    last = caplog.records[-1]
    assert (last.rows_done, last.rows_total, last.eta_s) == (600, 1000, 20.0)  # type: ignore[attr-defined]


def test_nothing_is_logged_before_the_work_starts(caplog: pytest.LogCaptureFixture) -> None:
    clock = StoppingClock(waits=2)
    reporter = Reporter(Progress(clock), LogLines("applied"), 5.0, clock)
    with caplog.at_level(logging.INFO, logger="relay.progress"):
        reporter.run(threading.Event())
    assert caplog.records == []


def test_a_failed_count_leaves_the_total_unknown(caplog: pytest.LogCaptureFixture) -> None:
    def failing(_positions: Mapping[int, int]) -> dict[int, Backlog]:
        raise DatabaseError("connection refused")

    clock = FakeClock()
    metrics = OutboxProgressMetrics(Progress(clock), clock=clock)
    metrics.expect([0], failing)
    metrics.running(0, 0)  # the run goes on
    metrics.published(0, 10, 0.1)
    clock.wait(2)
    snapshot = metrics.progress.snapshot()
    assert (snapshot.done, snapshot.total, snapshot.eta_s) == (10, None, None)
    assert snapshot.line("rows") == "10 rows, 5.00 rows/s, ETA -"


def test_the_mirror_counts_records_applied_and_dead_lettered() -> None:
    clock = FakeClock()
    metrics = MirrorProgressMetrics(Progress(clock), clock=clock)
    metrics.started(None)
    metrics.positioned({("orders", 0): None})
    metrics.applied(("orders", 0), 90, 10, 100)
    clock.wait(4)
    assert metrics.progress.snapshot().line("records") == (
        "100 records, 10 dead-lettered, 25 records/s, ETA -"
    )


def test_the_live_bar_shows_rows_and_total() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    progress = Progress(FakeClock())
    progress.add_total(1000)
    progress.advance(250)
    bar = LiveBar("published", console=console)
    bar.close(progress.snapshot())
    assert "published" in out.getvalue()
    assert "250/1000" in out.getvalue()


def test_spark_progress_counts_completed_tasks_over_jobs_and_stages() -> None:
    stages = {1: SimpleNamespace(numCompletedTasks=3), 2: SimpleNamespace(numCompletedTasks=2)}
    tracker = SimpleNamespace(
        getJobIdsForGroup=lambda: [7, 8],
        getJobInfo=lambda job: SimpleNamespace(stageIds=[1, 2]) if job == 7 else None,
        getStageInfo=stages.get,
    )
    assert completed_tasks(tracker) == 5


def test_a_replicate_run_counts_source_offsets_and_ends_at_100_percent() -> None:
    """Commit markers and aborted records take source offsets without a copy: the run
    counts offsets done toward the offsets to do (it said 150 of 195 when it was done),
    and tells the records copied and the offsets skipped apart."""
    clock = FakeClock()
    metrics = ReplicaProgressMetrics(Progress(clock), clock=clock)
    metrics.expect("t", 0)
    metrics.running("t", 0, 5)  # started at the committed position
    metrics.to_copy("t", 0, 195)
    metrics.copied("t", 0, 100, 0.1)
    metrics.running("t", 0, 130)  # a batch committed up to 130
    metrics.copied("t", 0, 50, 0.1)
    metrics.running("t", 0, 190)
    metrics.running("t", 0, 200)  # read up to the end: markers and aborted records
    snapshot = metrics.progress.snapshot()
    assert (snapshot.done, snapshot.total) == (195, 195)
    assert snapshot.line("offsets").startswith("195 of 195 offsets (100%)")
    assert (metrics.records_copied, metrics.offsets_skipped) == (150, 45)
