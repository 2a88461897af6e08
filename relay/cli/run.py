"""`relay run`: publish committed outbox rows to Kafka, continuously or ``--once``."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from relay.cli.signals import stop_on_signals
from relay.settings.flags import (
    add_connection_flags,
    add_metrics_flags,
    add_once_flag,
    add_progress_flag,
    add_relay_flags,
    add_summary_flag,
    relay_settings_from_args,
)
from relay.settings.relay import PROCESS_TRANSACTIONS

log = logging.getLogger("relay")


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "run", help="publish committed outbox rows to Kafka"
    )
    # The default since one transaction per process became it; still accepted (first:
    # the setting's own flag, --partition-transactions, is the dest's last action).
    parser.add_argument(
        "--process-transactions",
        dest=PROCESS_TRANSACTIONS.dest,
        action="store_const",
        const=True,
        default=None,
        help=argparse.SUPPRESS,
    )
    add_once_flag(parser, "publish everything committed when it started")
    add_progress_flag(parser)
    add_summary_flag(parser)
    add_connection_flags(parser)
    add_relay_flags(parser)
    add_metrics_flags(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from relay.cli.progress import showing
    from relay.commands.run import ProcessRelay
    from relay.runtime.metrics import OutboxMetrics, serving
    from relay.runtime.observed import OutboxProgressMetrics
    from relay.runtime.progress import Progress

    settings = relay_settings_from_args(args)
    log.info("starting: %s", settings.describe())
    # --once shows its progress: rows published of those pending at the start, rate, ETA.
    progress = Progress() if args.once else None
    metrics = OutboxMetrics() if progress is None else OutboxProgressMetrics(progress)
    relay = ProcessRelay(
        settings, args.partitions, metrics=metrics, summary_every_s=args.log_summary_s
    )
    stop_on_signals(relay.stop_event.set)
    with (
        serving(relay.metrics, settings.metrics_host, settings.metrics_port),
        showing(progress, "published", args.progress_interval_s),
    ):
        summary = relay.run(once=args.once)
    log.info(
        "published %d records (%s)",
        summary.total("records"),
        ", ".join(
            f"p{r.partition}: {r.records} up to seq {r.position}" for r in summary.partitions
        ),
    )
    return 0
