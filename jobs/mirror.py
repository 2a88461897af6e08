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

from relay import logs
from relay.cli import add_connection_flags
from relay.mirror.cli import add_mirror_flags, mirror_settings_from_args
from relay.mirror.service import check_not_past_end, lag_report, mirror_partition
from relay.mirror.settings import MirrorSettings
from relay.spark import job_main, run_tasks

log = logging.getLogger("relay.jobs.mirror")

TaskResult = tuple[str, int, int, int, int, int, int]


def run_task(settings: MirrorSettings, topic: str, partition: int, target: int) -> TaskResult:
    """What one Spark task runs: (topic, partition, applied, dead-lettered, skipped,
    offset conflicts, next offset)."""
    logs.configure("INFO")
    stats = mirror_partition(settings, topic, partition, target)
    return (
        topic,
        partition,
        stats.applied,
        stats.dead_lettered,
        stats.skipped,
        stats.conflicts,
        stats.next_offset or 0,
    )


def plan(settings: MirrorSettings) -> list[tuple[str, int, int]]:
    """(topic, partition, last stable offset) of every partition with work to do."""
    rows = lag_report(settings)
    for row in rows:
        check_not_past_end((row.topic, row.partition), row.next_offset, row.last_stable_offset)
    return [(row.topic, row.partition, row.last_stable_offset) for row in rows if row.lag > 0]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mirror", description=__doc__.split("\n")[0])
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    parser.add_argument("--log-level", default="INFO")
    add_connection_flags(parser)
    add_mirror_flags(parser)
    return parser.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_level)
    settings = mirror_settings_from_args(args)
    tasks = plan(settings)
    if not tasks:
        log.info("nothing to mirror: every partition is applied up to its last stable offset")
        return 0
    log.info(
        "mirroring %d partitions: %s",
        len(tasks),
        ", ".join(f"{t}[{p}] up to {target}" for t, p, target in tasks),
    )

    results: list[TaskResult]
    results, elapsed = run_tasks(
        "relay-mirror", args.master, tasks, lambda task: run_task(settings, *task)
    )
    for topic, partition, applied, dead, skipped, conflicts, next_offset in sorted(results):
        log.info(
            "%s[%d]: applied %d, dead-lettered %d, skipped %d, %d offset conflicts, next offset %d",
            topic,
            partition,
            applied,
            dead,
            skipped,
            conflicts,
            next_offset,
        )
    total = sum(r[2] for r in results)
    log.info(
        "mirrored %d records (dead-lettered %d) from %d partitions in %.1f s (%.0f records/s)",
        total,
        sum(r[3] for r in results),
        len(results),
        elapsed,
        total / elapsed if elapsed else 0.0,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("mirror", lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
