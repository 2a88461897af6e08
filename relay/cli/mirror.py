"""`relay mirror`: apply Kafka topics to PostgreSQL tables, continuously, ``--once`` or
``--lag``."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from relay.cli.signals import stop_on_signals
from relay.errors import ConfirmationRequiredError
from relay.mirroring.types import MirrorSummary
from relay.settings.env_flags import add_yes_flag, env_flag
from relay.settings.flags import (
    add_connection_flags,
    add_metrics_flags,
    add_mirror_flags,
    add_once_flag,
    add_progress_flag,
    mirror_settings_from_args,
)

log = logging.getLogger("relay")


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "mirror", help="apply Kafka topics to PostgreSQL tables exactly once"
    )
    mode = parser.add_mutually_exclusive_group()
    add_once_flag(mode, "apply everything committed up to the last stable offsets when it started")
    env_flag(
        mode,
        "--lag",
        env="RELAY_MIRROR_LAG",
        default=False,
        action="store_true",
        help="print each partition's stored offset, last stable offset and lag, and each "
        "table's complete-through time (heartbeats), then exit",
    )
    env_flag(
        mode,
        "--reset-recreated-topic",
        env="RELAY_MIRROR_RESET_RECREATED_TOPIC",
        shown="",
        metavar="TOPIC",
        help="apply TOPIC, deleted and created again, from its new offset 0; needs --yes",
    )
    add_yes_flag(parser, "do the reset (without: say what it would do, change nothing)")
    add_progress_flag(parser)
    add_connection_flags(parser)
    add_mirror_flags(parser)
    add_metrics_flags(parser)
    parser.set_defaults(handler=_mirror)


def _mirror(args: argparse.Namespace) -> int:
    from relay.cli.progress import showing
    from relay.commands.mirror import (
        MirrorService,
        lag_report,
        reset_recreated_topic,
        table_freshness,
    )
    from relay.runtime.collector import collect_less_often
    from relay.runtime.metrics import serving
    from relay.runtime.observed import MirrorProgressMetrics
    from relay.runtime.progress import Progress
    from relay.runtime.switching import switch_often

    settings = mirror_settings_from_args(args)
    if args.reset_recreated_topic:
        reset = reset_recreated_topic(settings, args.reset_recreated_topic, yes=args.yes)
        print("\n".join(reset.lines()))
        if reset.stale and not reset.done:
            raise ConfirmationRequiredError("nothing changed: run it again with --yes to reset")
        return 0
    if args.lag:
        print(
            f"{'topic':<30} {'partition':>9} {'applied up to':>13} {'stable':>10} {'lag':>8} "
            f"{'lag s':>10}"
        )
        for row in lag_report(settings, seconds=True):
            applied = "-" if row.next_offset is None else str(row.next_offset)
            print(
                f"{row.topic:<30} {row.partition:>9} {applied:>13} "
                f"{row.last_stable_offset:>10} {row.lag:>8} {seconds_text(row.lag_s):>10}"
            )
        print(f"\n{'table':<30} {'complete through':>32} {'lag (s)':>10}")
        for fresh in table_freshness(settings):
            through = "unknown" if fresh.complete_through is None else str(fresh.complete_through)
            lag = "-" if fresh.lag_s is None else f"{fresh.lag_s:.1f}"
            print(f"{fresh.table:<30} {through:>32} {lag:>10}")
        return 0
    log.info("starting mirror: %s", settings.describe())
    progress = Progress() if args.once else None  # --once: records applied, rate
    metrics = None if progress is None else MirrorProgressMetrics(progress)
    service = MirrorService(settings, metrics=metrics)
    stop_on_signals(service.stop_event.set, "applying what is fetched, then stopping")
    with (
        serving(service.metrics, settings.metrics_host, settings.metrics_port),
        showing(progress, "applied", args.progress_interval_s),
    ):
        collect_less_often()  # this process is the mirror's alone: it can (collector)
        switch_often()  # the applying thread gets the interpreter back quickly (switching)
        summary = service.run(once=args.once)
    print(describe_summary(summary))
    return 0


def seconds_text(seconds: float | None) -> str:
    """A lag in seconds as `relay mirror --lag` and `relay status` print it."""
    return "-" if seconds is None else f"{seconds:,.1f}"


def describe_summary(summary: MirrorSummary) -> str:
    conflicts = summary.total("conflicts")
    tombstones = summary.total("skipped_tombstones")
    lines = [
        f"mirrored {summary.total('applied')} records, dead-lettered "
        f"{summary.total('dead_lettered')}, skipped {summary.total('skipped')} "
        "(other event types)"
        + (
            f", {tombstones} tombstone{'' if tombstones == 1 else 's'} skipped"
            if tombstones
            else ""
        )
        + (f", {conflicts} offset conflicts" if conflicts else "")
    ]
    for p in summary.partitions:
        offset = "-" if p.next_offset is None else str(p.next_offset)
        lines.append(
            f"  {p.topic}[{p.partition}]: applied {p.applied}, dead-lettered "
            f"{p.dead_lettered}, next offset {offset}"
        )
    return "\n".join(lines)
