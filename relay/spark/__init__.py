"""The Spark jobs, and what they share: running tasks on a Spark session, a driver's
start-up and its exit codes.

:mod:`relay.spark.outbox_relay`, :mod:`relay.spark.mirror` and :mod:`relay.spark.replicate`
are the jobs. They sit in the adapter layer, below the command API, so the steps they run
(planning, one task's work) are handed to them by their entry points,
``jobs/outbox_relay.py``, ``jobs/mirror.py`` and ``jobs/replicate.py`` (the files
``spark-submit`` runs), which import :mod:`relay.commands`.

PySpark is imported only here and only when a job runs, so the rest of the package works
without it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from relay.errors import RelayError
from relay.runtime import logs
from relay.runtime.progress import DEFAULT_INTERVAL_S, LIVE_REFRESH_S, Progress, reporting
from relay.runtime.secrets import mask_text
from relay.settings.env_flags import apply_environment
from relay.settings.flags import add_job_flags

Item = TypeVar("Item")
Result = TypeVar("Result")

# A task's RelayError reaches the driver as text inside Spark's job failure.
_TASK_ERROR = re.compile(r"(relay\.[\w.]*Error): ([^\n]*)")


# spark-submit starts a Python driver with this set (its JVM's gateway). The SparkConf of
# a driver that has not started its session yet cannot see spark-submit's --master.
_SUBMITTED = "PYSPARK_GATEWAY_PORT"


def run_tasks(
    app_name: str,
    master: str | None,
    items: Sequence[Item],
    task: Callable[[Item], Result],
    progress_interval_s: float = DEFAULT_INTERVAL_S,
) -> tuple[list[Result], float]:
    """Run ``task`` on each item as one Spark task; returns the results and seconds taken.

    The master is ``master`` when given, else spark-submit's, else ``local[*]``. While
    the tasks run, the driver shows the tasks done, the rate and the ETA: a live bar on a
    terminal, else a log line every ``progress_interval_s``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf().setAppName(app_name)
    if master:
        conf.setMaster(master)
    elif _SUBMITTED not in os.environ:  # under spark-submit, its --master applies
        conf.setMaster("local[*]")
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    started = time.monotonic()
    progress = Progress()
    progress.add_total(len(items))
    shown = reporting(
        progress,
        app_name,
        interactive=sys.stderr.isatty(),
        interval_s=progress_interval_s,
        unit="tasks",
    )
    try:
        with shown, _tracking(spark.sparkContext.statusTracker(), progress):
            results: list[Result] = (
                spark.sparkContext.parallelize(list(items), len(items)).map(task).collect()
            )
    finally:
        spark.stop()
    return results, time.monotonic() - started


def completed_tasks(tracker: Any) -> int:
    """Tasks completed so far in the jobs of this driver (a ``StatusTracker``: each Spark
    task relays or mirrors one partition, and tells the driver only when it ends)."""
    done = 0
    for job in tracker.getJobIdsForGroup():
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None:
                done += int(stage_info.numCompletedTasks)
    return done


@contextmanager
def _tracking(tracker: Any, progress: Progress) -> Iterator[None]:
    """Count the tasks ``tracker`` sees completed into ``progress`` while the block runs."""
    stop = threading.Event()

    def track() -> None:
        counted = 0
        while not stop.wait(LIVE_REFRESH_S):
            done = completed_tasks(tracker)
            if done > counted:
                progress.advance(done - counted)
                counted = done

    thread = threading.Thread(target=track, name="relay-spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def job_main(
    prog: str,
    doc: str | None,
    add_flags: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None = None,
) -> int:
    """Run a job's driver: parse its flags (``--master``, ``--log-level`` and what
    ``add_flags`` adds), set up logging, then ``run``; one clear line on stderr and the
    error's exit code on failure. ``doc``: the job module's docstring (its first line is
    the description)."""
    parser = job_parser(prog, doc, add_flags)
    args = parser.parse_args(argv)
    as_json = False  # until the logs are set up: the error as a plain line

    def error(line: str, exc: Exception, code: int) -> int:
        if as_json:  # an object like every other line (relay.runtime.logs)
            logs.log_error(line, exc, code, traceback=False, logger=f"relay.jobs.{prog}")
        else:
            print(mask_text(line), file=sys.stderr)
        return code

    try:
        apply_environment(parser, args)
        logs.configure(args.log_level, log_format=args.log_format)
        as_json = args.log_format == "json"
        return run(args)
    except RelayError as exc:
        return error(f"{prog}: error: {exc}", exc, exc.exit_code)
    except Exception as exc:
        found = _TASK_ERROR.search(str(exc))
        if found is None:
            raise
        return error(f"{prog}: error: a task failed: {found[2]}", exc, 1)


def job_parser(
    prog: str, doc: str | None, add_flags: Callable[[argparse.ArgumentParser], None]
) -> argparse.ArgumentParser:
    """A job's flags: ``--master``, ``--log-level``, ``--log-format``,
    ``--progress-interval`` and what ``add_flags`` adds."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n")[0])
    add_job_flags(parser)
    add_flags(parser)
    return parser


def log_throughput(log: logging.Logger, done: str, records: int, elapsed: float) -> None:
    """A job's last line: ``<done> in <elapsed> s (<rate> records/s)``, e.g. ``published 800
    records from 4 relay partitions in 2.1 s (381 records/s)``."""
    rate = records / elapsed if elapsed else 0.0
    log.info("%s in %.1f s (%.0f records/s)", done, elapsed, rate)


def task_logging(log_format: str = "text") -> None:
    """Logging inside a Spark task's Python worker (it does not inherit the driver's), in
    the driver's ``--log-format``."""
    logs.configure("INFO", log_format=log_format)
