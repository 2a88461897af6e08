"""Spark job: mirror Kafka topics into PostgreSQL tables, one Spark task per Kafka partition.

    spark-submit jobs/mirror.py [--master local[*]] [--mapping mirror.toml] [mirror flags]
    python jobs/mirror.py ...                  (same, with the pip-installed PySpark)

Settings come from the same RELAY_* variables and flags as `relay mirror`. The driver
checks the environment and the mapping, lists the partitions of the mapped topics and
captures each one's last stable offset; partitions whose stored offset is behind it
become tasks. Each task reads the partition's stored offset itself, assigns the
partition there and applies records up to the captured offset with the same core and
the same compare-and-set as `relay mirror`: a failed, re-run or speculative task can
neither skip nor apply a record twice. The job exits 0 when every partition is applied
up to its target, non-zero with one clear line otherwise.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from relay.mirroring.types import PartitionStats
from relay.settings.flags import add_connection_flags, add_mirror_flags, mirror_settings_from_args
from relay.settings.mirror import MirrorSettings
from relay.spark import job_main, log_throughput, run_tasks, task_logging

log = logging.getLogger("relay.jobs.mirror")

Task = tuple[str, int, int]  # topic, partition, the offset to apply up to


@dataclass(frozen=True, slots=True)
class MirrorSteps:
    """What the job runs, from the command API (``relay.commands.mirror``)."""

    # The partitions behind their last stable offset, after the start-up checks
    # (plan_mirror_job).
    plan: Callable[[MirrorSettings], list[Task]]
    # One task's work: apply one partition up to the offset (mirror_partition).
    apply: Callable[[MirrorSettings, str, int, int], PartitionStats]


def run_task(
    steps: MirrorSteps, settings: MirrorSettings, task: Task, log_format: str = "text"
) -> PartitionStats:
    """What one Spark task runs."""
    task_logging(log_format)
    return steps.apply(settings, *task)


def add_flags(parser: argparse.ArgumentParser) -> None:
    add_connection_flags(parser)
    add_mirror_flags(parser)


def run(steps: MirrorSteps, args: argparse.Namespace) -> int:
    settings = mirror_settings_from_args(args)
    tasks = steps.plan(settings)
    if not tasks:
        log.info("nothing to mirror: every partition is applied up to its last stable offset")
        return 0
    log.info(
        "mirroring %d partitions: %s",
        len(tasks),
        ", ".join(f"{t}[{p}] up to {target}" for t, p, target in tasks),
    )
    log_format = args.log_format  # the tasks log as the driver does
    results, elapsed = run_tasks(
        "relay-mirror",
        args.master,
        tasks,
        lambda task: run_task(steps, settings, task, log_format),
        args.progress_interval_s,
    )
    for stats in sorted(results, key=lambda s: (s.topic, s.partition)):
        log.info(
            "%s[%d]: applied %d, dead-lettered %d, skipped %d (%d tombstones), %d offset "
            "conflicts, next offset %d",
            stats.topic,
            stats.partition,
            stats.applied,
            stats.dead_lettered,
            stats.skipped,
            stats.skipped_tombstones,
            stats.conflicts,
            stats.next_offset or 0,
        )
    total = sum(s.applied for s in results)
    dead = sum(s.dead_lettered for s in results)
    done = f"mirrored {total} records (dead-lettered {dead}) from {len(results)} partitions"
    log_throughput(log, done, total, elapsed)
    return 0


def main(steps: MirrorSteps, argv: Sequence[str] | None = None) -> int:
    """The job's driver: flags, start-up checks, one Spark task per Kafka partition."""
    return job_main("mirror", __doc__, add_flags, lambda args: run(steps, args), argv)
