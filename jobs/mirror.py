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
import sys
from collections.abc import Sequence

from relay.commands.mirror import mirror_partition, plan_mirror_job
from relay.mirroring.types import PartitionStats
from relay.settings.flags import add_connection_flags, add_mirror_flags, mirror_settings_from_args
from relay.settings.mirror import MirrorSettings
from relay.spark import job_main, run_tasks, task_logging

log = logging.getLogger("relay.jobs.mirror")


def run_task(settings: MirrorSettings, topic: str, partition: int, target: int) -> PartitionStats:
    """What one Spark task runs."""
    task_logging()
    return mirror_partition(settings, topic, partition, target)


def add_flags(parser: argparse.ArgumentParser) -> None:
    add_connection_flags(parser)
    add_mirror_flags(parser)


def run(args: argparse.Namespace) -> int:
    settings = mirror_settings_from_args(args)
    tasks = plan_mirror_job(settings)
    if not tasks:
        log.info("nothing to mirror: every partition is applied up to its last stable offset")
        return 0
    log.info(
        "mirroring %d partitions: %s",
        len(tasks),
        ", ".join(f"{t}[{p}] up to {target}" for t, p, target in tasks),
    )
    results, elapsed = run_tasks(
        "relay-mirror", args.master, tasks, lambda task: run_task(settings, *task)
    )
    for stats in sorted(results, key=lambda s: (s.topic, s.partition)):
        log.info(
            "%s[%d]: applied %d, dead-lettered %d, skipped %d, %d offset conflicts, next offset %d",
            stats.topic,
            stats.partition,
            stats.applied,
            stats.dead_lettered,
            stats.skipped,
            stats.conflicts,
            stats.next_offset or 0,
        )
    total = sum(s.applied for s in results)
    log.info(
        "mirrored %d records (dead-lettered %d) from %d partitions in %.1f s (%.0f records/s)",
        total,
        sum(s.dead_lettered for s in results),
        len(results),
        elapsed,
        total / elapsed if elapsed else 0.0,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("mirror", __doc__.split("\n")[0], add_flags, run, argv)


if __name__ == "__main__":
    sys.exit(main())
