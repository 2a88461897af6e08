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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from relay.publishing.types import DrainResult
from relay.settings.flags import add_connection_flags, add_relay_flags, relay_settings_from_args
from relay.settings.relay import RelaySettings
from relay.spark import job_main, log_throughput, run_tasks, task_logging

log = logging.getLogger("relay.jobs.outbox_relay")


@dataclass(frozen=True, slots=True)
class RelaySteps:
    """What the job runs, from the command API (``relay.commands.relay_job``)."""

    # The relay partitions to run as tasks, after the start-up checks (plan_relay_job).
    plan: Callable[[RelaySettings, Sequence[int] | None], list[int]]
    # One task's work: drain one relay partition (drain_partition).
    drain: Callable[[RelaySettings, int], DrainResult]


def run_task(
    steps: RelaySteps, settings: RelaySettings, partition: int, log_format: str = "text"
) -> DrainResult:
    """What one Spark task runs."""
    task_logging(log_format)
    return steps.drain(settings, partition)


def add_flags(parser: argparse.ArgumentParser) -> None:
    add_connection_flags(parser)
    add_relay_flags(parser)


def run(steps: RelaySteps, args: argparse.Namespace) -> int:
    settings = relay_settings_from_args(args)
    partitions = steps.plan(settings, args.partitions)
    log_format = args.log_format  # the tasks log as the driver does
    results, elapsed = run_tasks(
        "outbox-relay",
        args.master,
        partitions,
        lambda p: run_task(steps, settings, p, log_format),
        args.progress_interval_s,
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
    done = f"published {total} records from {len(results)} relay partitions"
    log_throughput(log, done, total, elapsed)
    return 0


def main(steps: RelaySteps, argv: Sequence[str] | None = None) -> int:
    """The job's driver: flags, start-up checks, one Spark task per relay partition."""
    return job_main("outbox_relay", __doc__, add_flags, lambda args: run(steps, args), argv)
