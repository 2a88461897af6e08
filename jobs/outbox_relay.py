"""Spark job: publish the outbox to Kafka, one Spark task per relay partition.

    spark-submit jobs/outbox_relay.py [--master local[*]] [--partitions 0,1] [relay flags]
    python jobs/outbox_relay.py ...            (same, with the pip-installed PySpark)

Settings come from the same RELAY_* variables and flags as `relay run`. Each task fences
its relay partition, reads the committed position from Kafka and publishes everything
committed up to when the task started, in Kafka transactions that carry the position.
A failed, re-run or speculative task is therefore harmless: a second attempt fences the
first and continues from the position the first committed. The job exits 0 when every
partition is drained, non-zero with one clear line otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from relay.commands.run import drain_partition, plan_relay_job
from relay.publishing.types import DrainResult
from relay.settings.flags import add_connection_flags, add_relay_flags, relay_settings_from_args
from relay.settings.relay import RelaySettings
from relay.spark import job_main, run_tasks, task_logging

log = logging.getLogger("relay.jobs.outbox_relay")


def run_task(settings: RelaySettings, partition: int) -> DrainResult:
    """What one Spark task runs."""
    task_logging()
    return drain_partition(settings, partition)


def add_flags(parser: argparse.ArgumentParser) -> None:
    add_connection_flags(parser)
    add_relay_flags(parser)


def run(args: argparse.Namespace) -> int:
    settings = relay_settings_from_args(args)
    partitions = plan_relay_job(settings, args.partitions)
    results, elapsed = run_tasks(
        "outbox-relay", args.master, partitions, lambda p: run_task(settings, p)
    )
    total = sum(r.records for r in results)
    for result in sorted(results, key=lambda r: r.partition):
        log.info(
            "relay partition %d: %d records in %d batches, position %d",
            result.partition,
            result.records,
            result.batches,
            result.position,
        )
    log.info(
        "published %d records from %d relay partitions in %.1f s (%.0f records/s)",
        total,
        len(results),
        elapsed,
        total / elapsed if elapsed else 0.0,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("outbox_relay", __doc__.split("\n")[0], add_flags, run, argv)


if __name__ == "__main__":
    sys.exit(main())
