"""Spark job: copy Kafka topics to another cluster exactly once, one Spark task per partition.

    spark-submit jobs/replicate.py [--master local[*]] --topics A,B [replicate flags]
    python jobs/replicate.py ...               (same, with the pip-installed PySpark)

Settings come from the same RELAY_REPLICATE_* variables and flags as `relay replicate`.
The driver selects the source topics, creates or grows their target topics, and captures
each source partition's last stable offset; every source partition becomes a task. Each
task fences its target partition's transactional id, reads the position committed on the
target, and copies the committed records up to the captured offset in target
transactions that carry the position, with the same core as `relay replicate --once`.
A failed, re-run or speculative task is therefore harmless: a second attempt fences the
first and continues from the position the first committed. The job exits 0 when every
partition is copied up to its captured offset, non-zero with one clear line otherwise.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from relay.replication.types import ReplicaResult, Route
from relay.settings.flags import add_replicate_flags, replicate_settings_from_args
from relay.settings.replicate import ReplicateSettings
from relay.spark import job_main, log_throughput, run_tasks, task_logging

log = logging.getLogger("relay.jobs.replicate")


class Task(Protocol):
    """One source partition to copy up to an offset (``relay.commands.replicate.
    ReplicaTask``); it travels to the Spark task, so it must pickle."""

    @property
    def route(self) -> Route: ...

    @property
    def end_offset(self) -> int | None: ...


TaskT = TypeVar("TaskT", bound=Task)


@dataclass(frozen=True, slots=True)
class ReplicateSteps(Generic[TaskT]):
    """What the job runs, from the command API (``relay.commands.replicate``)."""

    # The source partitions with their last stable offsets, target topics created or
    # grown (plan_replication, then with_end_offsets). Runs on the driver only.
    plan: Callable[[ReplicateSettings], Sequence[TaskT]]
    # One task's work: copy one source partition up to its offset (replicate_partition).
    copy: Callable[[ReplicateSettings, TaskT], ReplicaResult]


def run_task(
    copy: Callable[[ReplicateSettings, TaskT], ReplicaResult],
    settings: ReplicateSettings,
    task: TaskT,
    log_format: str = "text",
) -> ReplicaResult:
    """What one Spark task runs."""
    task_logging(log_format)
    return copy(settings, task)


def add_flags(parser: argparse.ArgumentParser) -> None:
    add_replicate_flags(parser)


def run(steps: ReplicateSteps[TaskT], args: argparse.Namespace) -> int:
    settings = replicate_settings_from_args(args)
    tasks = list(steps.plan(settings))
    if not tasks:
        log.warning(
            "nothing to replicate: no source topic matches %s", settings.selection.describe()
        )
        return 0
    log.info(
        "replicating %d source partitions: %s",
        len(tasks),
        ", ".join(
            f"{t.route} -> {t.route.target_topic}[{t.route.partition}] up to {t.end_offset}"
            for t in tasks
        ),
    )
    # The tasks get only the copy step (the planning stays on the driver), and log as the
    # driver does.
    copy, log_format = steps.copy, args.log_format
    results, elapsed = run_tasks(
        "relay-replicate",
        args.master,
        tasks,
        lambda task: run_task(copy, settings, task, log_format),
        args.progress_interval_s,
    )
    for r in sorted(results, key=lambda r: (r.topic, r.partition)):
        log.info(
            "%s[%d] -> %s[%d]: %d records in %d batches, next source offset %d",
            r.topic,
            r.partition,
            r.target_topic,
            r.partition,
            r.records,
            r.batches,
            r.next_offset,
        )
    total = sum(r.records for r in results)
    done = f"copied {total} records from {len(results)} source partitions"
    log_throughput(log, done, total, elapsed)
    return 0


def main(steps: ReplicateSteps[TaskT], argv: Sequence[str] | None = None) -> int:
    """The job's driver: flags, topic planning, one Spark task per source partition."""
    return job_main("replicate", __doc__, add_flags, lambda args: run(steps, args), argv)
