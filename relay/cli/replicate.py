"""`relay replicate`: copy Kafka topics to another cluster exactly once, continuously or
``--once``; ``--translate-group`` moves a consumer group's offsets over for a failover."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

from relay.cli.signals import stop_on_signals
from relay.errors import ConfirmationRequiredError, OffsetTranslationError
from relay.replication.lag import RouteLag
from relay.replication.translation import TranslatedOffset, TranslationStatus, changes, held_back
from relay.replication.types import ReplicaResult
from relay.runtime.summary import RunSummary
from relay.settings.env_flags import add_yes_flag, env_flag
from relay.settings.flags import (
    add_metrics_flags,
    add_once_flag,
    add_progress_flag,
    add_replicate_flags,
    add_summary_flag,
    replicate_settings_from_args,
)
from relay.settings.replicate import ReplicateSettings

log = logging.getLogger("relay")


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "replicate", help="copy Kafka topics to another Kafka cluster exactly once"
    )
    mode = parser.add_mutually_exclusive_group()
    add_once_flag(mode, "copy everything committed on the source when it started")
    env_flag(
        mode,
        "--translate-group",
        env="RELAY_REPLICATE_TRANSLATE_GROUP",
        shown="",
        metavar="GROUP",
        help="consumer failover: print where consumer group GROUP continues on the target "
        "topics (its committed source offsets, translated), then exit; with --yes, commit "
        "them for GROUP on the target cluster",
    )
    env_flag(
        mode,
        "--reset-recreated-topic",
        env="RELAY_REPLICATE_RESET_RECREATED_TOPIC",
        shown="",
        metavar="TOPIC",
        help="copy source topic TOPIC, deleted and created again, from its new first offset: "
        "print the positions that move, then exit; with --yes, move them",
    )
    env_flag(
        mode,
        "--restore-positions",
        env="RELAY_REPLICATE_RESTORE_POSITIONS",
        default=False,
        action="store_true",
        help="set each partition's position from its last copy on the target (after the "
        "group's offsets were deleted, expired or moved): print them, then exit; with "
        "--yes, commit them",
    )
    env_flag(
        mode,
        "--lag",
        env="RELAY_REPLICATE_LAG",
        default=False,
        action="store_true",
        help="print each source partition's last stable offset, the position on the target, "
        "and how far behind that is in offsets and in seconds, then exit",
    )
    add_yes_flag(
        parser,
        "with --translate-group, --reset-recreated-topic or --restore-positions: change "
        "them (without: show them, change nothing)",
    )
    add_progress_flag(parser)
    add_summary_flag(parser)
    add_replicate_flags(parser)
    add_metrics_flags(parser)
    parser.set_defaults(handler=_replicate)


def _replicate(args: argparse.Namespace) -> int:
    from relay.cli.progress import showing
    from relay.commands.replicate import ReplicateService
    from relay.runtime.collector import collect_less_often
    from relay.runtime.metrics import serving
    from relay.runtime.observed import ReplicaProgressMetrics
    from relay.runtime.progress import Progress

    settings = replicate_settings_from_args(args)
    if args.lag:
        from relay.commands.replicate_lag import lag_report

        print(describe_lag(lag_report(settings)))
        return 0
    if args.translate_group:
        return _translate_group(settings, args.translate_group, yes=args.yes)
    if args.reset_recreated_topic or args.restore_positions:
        return _positions(settings, args.reset_recreated_topic, yes=args.yes)
    log.info("starting replicate: %s", settings.describe())
    progress = Progress() if args.once else None
    metrics = None if progress is None else ReplicaProgressMetrics(progress)
    service = ReplicateService(settings, metrics=metrics, summary_every_s=args.log_summary_s)
    stop_on_signals(service.stop_event.set, "finishing the open transactions, then stopping")
    with (
        serving(service.metrics, settings.metrics_host, settings.metrics_port),
        # in source offsets: markers and aborted records take offsets without a copy
        showing(progress, "copied", args.progress_interval_s, unit="offsets"),
    ):
        collect_less_often()  # this process is the replicator's alone: it can (collector)
        summary = service.run(once=args.once)
    print(describe_summary(summary, None if metrics is None else metrics.offsets_skipped))
    return 0


def _positions(settings: ReplicateSettings, recreated: str | None, *, yes: bool) -> int:
    from relay.commands import replicate_positions

    if recreated:
        change = replicate_positions.reset_recreated_topic(settings, recreated, yes=yes)
    else:
        change = replicate_positions.restore_positions(settings, yes=yes)
    print("\n".join(change.lines))
    if change.changes and not yes:
        raise ConfirmationRequiredError("nothing changed: run it again with --yes to commit them")
    if change.done:
        print(f"committed {change.changes} positions on the target cluster")
    return 0


def _translate_group(settings: ReplicateSettings, group: str, *, yes: bool) -> int:
    from relay.commands import replicate_offsets

    rows = replicate_offsets.translate(settings, group)
    print(describe_translation(group, rows))
    if not yes:
        if changes(rows):
            raise ConfirmationRequiredError(
                "nothing changed: run it again with --yes to commit the offsets on the target"
            )
        return 0
    applied = replicate_offsets.apply(settings, group, rows)
    print(f"committed {len(applied)} offsets for group {group} on the target cluster")
    for row in applied:
        print(f"  {row.target_topic}[{row.partition}]: {row.target_offset}")
    if held := held_back(rows):
        raise OffsetTranslationError(
            f"{len(held)} partition(s) of group {group} not applied ("
            + ", ".join(f"{r.topic}[{r.partition}]: {r.status}" for r in held)
            + "); the others were committed. Run it again once the replicator has copied "
            "up to the group's offsets (docs/replication.md, 'Failing consumers over')"
        )
    return 0


def _status(row: TranslatedOffset) -> str:
    if row.status is TranslationStatus.NO_OFFSET:
        return "no offset, skipped"
    if not row.status.applicable:
        return f"{row.status}, not applied"
    return str(row.status) if row.changes else f"{row.status}, already committed"


def describe_translation(group: str, rows: Sequence[TranslatedOffset]) -> str:
    """The table `relay replicate --translate-group` prints."""
    table = [
        ("topic", "partition", "source offset", "target topic", "target offset", "status"),
        *(
            (
                row.topic,
                str(row.partition),
                "-" if row.source_offset is None else str(row.source_offset),
                row.target_topic,
                "-" if row.target_offset is None else str(row.target_offset),
                _status(row),
            )
            for row in rows
        ),
    ]
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    aligned = [
        [f"{line[i]:{align}{widths[i]}}" for i, align in enumerate("<>><>")] + [line[5]]
        for line in table
    ]
    lines = ["  ".join(cells) for cells in aligned]
    return "\n".join([f"group {group}: committed source offsets -> target offsets", *lines])


def describe_summary(summary: RunSummary[ReplicaResult], skipped: int | None = None) -> str:
    """What a run copied; ``skipped``: the source offsets it passed without a copy."""
    lines = [f"copied {summary.total('records')} records"]
    if skipped is not None:
        lines[0] += (
            f", skipped {skipped} source offsets (transaction markers, records of aborted "
            "transactions)"
        )
    lines += [
        f"  {r.topic}[{r.partition}] -> {r.target_topic}[{r.partition}]: {r.records} records, "
        f"next source offset {r.next_offset}"
        for r in summary.partitions
    ]
    return "\n".join(lines)


def describe_lag(rows: Sequence[RouteLag]) -> str:
    """The table `relay replicate --lag` prints."""
    table = [
        ("topic", "partition", "target topic", "source end", "position", "behind", "seconds"),
        *(
            (
                row.route.topic,
                str(row.route.partition),
                row.route.target_topic,
                str(row.source_end),
                "-" if row.position is None else str(row.position),
                str(row.records_behind),
                "-" if row.seconds is None else f"{row.seconds:,.1f}",
            )
            for row in rows
        ),
    ]
    widths = [max(len(line[i]) for line in table) for i in range(7)]
    bases = ["from", *(row.basis for row in rows)]
    lines = [
        "  ".join(
            f"{cell:{align}{width}}"
            for cell, align, width in zip(line, "<><>>>>", widths, strict=True)
        )
        + f"  {basis}"
        for line, basis in zip(table, bases, strict=True)
    ]
    return "\n".join(lines)
