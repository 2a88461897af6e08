"""`relay mirror`: the command line of the reverse relay (a thin layer over the service)."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING, Any

from relay.mirror.loop import MirrorSummary

if TYPE_CHECKING:
    from relay.mirror.settings import MirrorSettings

log = logging.getLogger("relay")


def add_mirror_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("mirror")
    group.add_argument(
        "--mapping",
        dest="mirror_config",
        metavar="FILE",
        help="topic-to-table mapping, TOML [RELAY_MIRROR_CONFIG]",
    )
    group.add_argument(
        "--group",
        dest="mirror_group",
        metavar="NAME",
        help="consumer group; its offsets live in mirror_offsets [RELAY_MIRROR_GROUP=relay-mirror]",
    )
    group.add_argument(
        "--batch-size",
        dest="mirror_batch_size",
        type=int,
        metavar="N",
        help="records of one partition per database transaction [RELAY_MIRROR_BATCH_SIZE=2000]",
    )
    group.add_argument(
        "--max-wait",
        dest="mirror_max_wait_s",
        type=float,
        metavar="SECONDS",
        help="longest a fetched record waits for its batch [RELAY_MIRROR_MAX_WAIT_S=0.5]",
    )
    group.add_argument(
        "--topics",
        dest="mirror_topics",
        metavar="A,B",
        help="only these mapped topics (default: all) [RELAY_MIRROR_TOPICS]",
    )


def add_mirror_command(subparsers: Any) -> None:
    """Register `relay mirror` on the `relay` command's subparsers."""
    from relay.cli import add_connection_flags

    mirror: argparse.ArgumentParser = subparsers.add_parser(
        "mirror", help="apply Kafka topics to PostgreSQL tables exactly once"
    )
    mode = mirror.add_mutually_exclusive_group()
    mode.add_argument(
        "--once",
        action="store_true",
        help="apply everything committed up to the last stable offsets when it started, "
        "then exit 0",
    )
    mode.add_argument(
        "--lag",
        action="store_true",
        help="print each partition's stored offset, last stable offset and lag, then exit",
    )
    add_connection_flags(mirror)
    add_mirror_flags(mirror)
    mirror.set_defaults(handler=_cmd_mirror)


def mirror_settings_from_args(args: argparse.Namespace) -> MirrorSettings:
    from relay.cli import settings_from_args
    from relay.mirror.settings import load_mirror_settings

    overrides = {
        "config": args.mirror_config,
        "group": args.mirror_group,
        "batch_size": args.mirror_batch_size,
        "max_wait_s": args.mirror_max_wait_s,
        "topics": args.mirror_topics,
    }
    return load_mirror_settings(settings_from_args(args), overrides)


def _cmd_mirror(args: argparse.Namespace) -> int:
    from relay.cli import stop_on_signals
    from relay.mirror.service import MirrorService, lag_report

    settings = mirror_settings_from_args(args)
    if args.lag:
        print(f"{'topic':<30} {'partition':>9} {'applied up to':>13} {'stable':>10} {'lag':>8}")
        for row in lag_report(settings):
            applied = "-" if row.next_offset is None else str(row.next_offset)
            print(
                f"{row.topic:<30} {row.partition:>9} {applied:>13} "
                f"{row.last_stable_offset:>10} {row.lag:>8}"
            )
        return 0
    log.info("starting mirror: %s", settings.describe())
    service = MirrorService(settings)
    stop_on_signals(service.stop_event.set, "applying what is fetched, then stopping")
    summary = service.run(once=args.once)
    print(describe_summary(summary))
    return 0


def describe_summary(summary: MirrorSummary) -> str:
    lines = [
        f"mirrored {summary.applied} records, dead-lettered {summary.dead_lettered}, "
        f"skipped {summary.skipped} (other event types)"
        + (f", {summary.conflicts} offset conflicts" if summary.conflicts else "")
    ]
    for p in summary.partitions:
        offset = "-" if p.next_offset is None else str(p.next_offset)
        lines.append(
            f"  {p.topic}[{p.partition}]: applied {p.applied}, dead-lettered "
            f"{p.dead_lettered}, next offset {offset}"
        )
    return "\n".join(lines)
