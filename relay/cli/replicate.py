"""`relay replicate`: copy Kafka topics to another cluster exactly once, continuously or
``--once``."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from relay.cli.progress import showing
from relay.cli.signals import stop_on_signals
from relay.commands.replicate import ReplicateService
from relay.replication.types import ReplicaResult
from relay.runtime.progress import Progress
from relay.runtime.summary import RunSummary
from relay.settings.flags import add_once_flag, add_progress_flag
from relay.settings.replicate_flags import add_replicate_flags, replicate_settings_from_args

log = logging.getLogger("relay")


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "replicate", help="copy Kafka topics to another Kafka cluster exactly once"
    )
    add_once_flag(parser, "copy everything committed on the source when it started")
    add_progress_flag(parser)
    add_replicate_flags(parser)
    parser.set_defaults(handler=_replicate)


def _replicate(args: argparse.Namespace) -> int:
    settings = replicate_settings_from_args(args)
    log.info("starting replicate: %s", settings.describe())
    progress = Progress() if args.once else None
    service = ReplicateService(settings, progress=progress)
    stop_on_signals(service.stop_event.set, "finishing the open transactions, then stopping")
    with showing(progress, "copied", args.progress_interval_s):
        summary = service.run(once=args.once)
    print(describe_summary(summary))
    return 0


def describe_summary(summary: RunSummary[ReplicaResult]) -> str:
    lines = [f"copied {summary.total('records')} records"]
    lines += [
        f"  {r.topic}[{r.partition}] -> {r.target_topic}[{r.partition}]: {r.records} records, "
        f"next source offset {r.next_offset}"
        for r in summary.partitions
    ]
    return "\n".join(lines)
