"""The Spark jobs, and what they share: running tasks on a Spark session, a driver's
start-up and its exit codes.

:mod:`relay.spark.outbox_relay` and :mod:`relay.spark.mirror` are the jobs. They sit in the
adapter layer, below the command API, so the steps they run (planning, one task's work)
are handed to them by their entry points, ``jobs/outbox_relay.py`` and ``jobs/mirror.py``
(the files ``spark-submit`` runs), which import :mod:`relay.commands`.

PySpark is imported only here and only when a job runs, so the rest of the package works
without it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from relay.errors import RelayError
from relay.runtime import logs
from relay.runtime.secrets import mask_text
from relay.settings.flags import add_job_flags

Item = TypeVar("Item")
Result = TypeVar("Result")

# A task's RelayError reaches the driver as text inside Spark's job failure.
_TASK_ERROR = re.compile(r"(relay\.[\w.]*Error): ([^\n]*)")


def run_tasks(
    app_name: str,
    master: str | None,
    items: Sequence[Item],
    task: Callable[[Item], Result],
) -> tuple[list[Result], float]:
    """Run ``task`` on each item as one Spark task; returns the results and seconds taken.

    The master is ``master`` when given, else spark-submit's, else ``local[*]``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf().setAppName(app_name)
    if master:
        conf.setMaster(master)
    elif not conf.contains("spark.master"):
        conf.setMaster("local[*]")
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    started = time.monotonic()
    try:
        results: list[Result] = (
            spark.sparkContext.parallelize(list(items), len(items)).map(task).collect()
        )
    finally:
        spark.stop()
    return results, time.monotonic() - started


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
    description = (doc or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_job_flags(parser)
    add_flags(parser)
    args = parser.parse_args(argv)
    logs.configure(args.log_level)
    try:
        return run(args)
    except RelayError as exc:
        print(f"{prog}: error: {mask_text(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:
        found = _TASK_ERROR.search(str(exc))
        if found is None:
            raise
        print(f"{prog}: error: a task failed: {mask_text(found[2])}", file=sys.stderr)
        return 1


def log_throughput(log: logging.Logger, done: str, records: int, elapsed: float) -> None:
    """A job's last line: ``<done> in <elapsed> s (<rate> records/s)``, e.g. ``published 800
    records from 4 relay partitions in 2.1 s (381 records/s)``."""
    rate = records / elapsed if elapsed else 0.0
    log.info("%s in %.1f s (%.0f records/s)", done, elapsed, rate)


def task_logging() -> None:
    """Logging inside a Spark task's Python worker (it does not inherit the driver's)."""
    logs.configure("INFO")
