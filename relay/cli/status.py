"""`relay status`: positions, pending rows, held-up partitions and the mirror's lag, as text
or JSON; with ``--max-lag``/``--max-age``, a check that exits 6 on a breach.

The rendering (:func:`render_text`, :func:`render_json`) is pure; the JSON keys are
documented in docs/operations.md ("Status and monitoring checks") and only ever added to.
"""

from __future__ import annotations

import argparse
import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from relay.cli.mirror import seconds_text
from relay.errors import StatusCheckError
from relay.settings.flags import (
    add_connection_flags,
    add_mirror_flags,
    add_relay_flags,
    mirror_settings_from_args,
    relay_settings_from_args,
)
from relay.settings.mirror import GROUP as MIRROR_GROUP
from relay.settings.mirror import MAPPING as MIRROR_MAPPING
from relay.settings.mirror import TOPICS as MIRROR_TOPICS
from relay.settings.relay import POSITIONS_GROUP, POSITIONS_TOPIC, TRANSACTIONAL_ID_PREFIX
from relay.settings.spec import add_flags
from relay.settings.status import STATUS

if TYPE_CHECKING:
    from relay.commands.status import StatusOptions, StatusReport
    from relay.postgres.migrations import SchemaRevision


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "status",
        help="each relay partition's position, pending rows and holders, the mirror's lag "
        "and the schema; --max-lag/--max-age exit 6 on a breach",
    )
    add_flags(
        parser.add_argument_group("status (flags win over RELAY_STATUS_* environment)"), STATUS
    )
    add_connection_flags(parser)
    # Only what status reads: where the positions are, and which mirror to report on.
    add_relay_flags(parser, only=(TRANSACTIONAL_ID_PREFIX, POSITIONS_TOPIC, POSITIONS_GROUP))
    add_mirror_flags(parser, only=(MIRROR_MAPPING, MIRROR_GROUP, MIRROR_TOPICS))
    parser.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    from relay.commands import status

    if logging.getLogger().level > logging.DEBUG:
        # Reading the schema revision is not a migration: no "Context impl" lines.
        logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING)
    options = status.load_status_options(vars(args))
    settings = relay_settings_from_args(args)
    mirror = status.load_mirror_scope(vars(args), lambda: mirror_settings_from_args(args))
    report = status.status(settings, args.partitions, mirror)
    failed = status.failed_checks(report, options)
    render = render_json if options.output == "json" else render_text
    print(render(report, options, failed), flush=True)
    if failed:
        raise StatusCheckError("; ".join(failed))
    return 0


def render_text(report: StatusReport, options: StatusOptions, failed: list[str]) -> str:
    lines = [
        f"schema    {report.schema.current} ({_schema_state(report.schema)})",
        f"checked   {_time(report.checked_at, 'seconds')} (database clock)",
        f"outbox    positions group {report.positions_group}",
        f"{'partition':>9} {'position':>12} {'pending':>10} {'oldest pending':>14}  "
        f"{'last publish':<25} {'dead letters':>12}  held up by",
    ]
    for p in report.outbox:
        age = "-" if p.oldest_pending_age_s is None else f"{p.oldest_pending_age_s:,.0f} s"
        published = "-" if p.last_publish is None else _time(p.last_publish, "seconds")
        lines.append(
            f"{p.partition:>9} {p.position:>12} {p.pending:>10,} {age:>14}  {published:<25} "
            f"{p.dead_letters:>12,}  {', '.join(p.held_up_by) or '-'}"
        )
    if report.mirror:
        lines.append("mirror")
        lines.append(
            f"{'group':<20} {'topic':<30} {'partition':>9} {'applied up to':>13} "
            f"{'stable':>10} {'lag':>8} {'dead letters':>12} {'lag s':>10}"
        )
    for m in report.mirror:
        applied = "-" if m.next_offset is None else str(m.next_offset)
        lines.append(
            f"{m.group:<20} {m.topic:<30} {m.partition:>9} {applied:>13} "
            f"{m.last_stable_offset:>10} {m.lag:>8,} {m.dead_letters:>12,} "
            f"{seconds_text(m.lag_s):>10}"
        )
    if options.max_lag is not None or options.max_age_s is not None:
        lines.append(f"checks    {'FAILED' if failed else 'passed'} ({_limits(options)})")
    return "\n".join(lines)


def render_json(report: StatusReport, options: StatusOptions, failed: list[str]) -> str:
    schema = report.schema
    document = {
        "checked_at": _time(report.checked_at, "milliseconds"),
        "schema": {
            "current": schema.current,
            "head": schema.head,
            "up_to_date": schema.up_to_date,
            "oldest_compatible": schema.oldest_compatible,
        },
        "positions_group": report.positions_group,
        "outbox": [
            {
                "partition": p.partition,
                "position": p.position,
                "pending": p.pending,
                "oldest_pending_age_s": (
                    None if p.oldest_pending_age_s is None else round(p.oldest_pending_age_s, 3)
                ),
                "floor": p.floor,
                "last_publish": (
                    None if p.last_publish is None else _time(p.last_publish, "milliseconds")
                ),
                "dead_letters": p.dead_letters,
                "held_up": bool(p.held_up_by),
                "held_up_by": list(p.held_up_by),
                "stall": None
                if p.stall is None
                else {
                    "outbox_id": p.stall.outbox_id,
                    "topic": p.stall.topic,
                    "reason": p.stall.reason,
                    "since": _time(p.stall.since, "milliseconds"),
                },
            }
            for p in report.outbox
        ],
        "mirror": [
            {
                "group": m.group,
                "topic": m.topic,
                "partition": m.partition,
                "next_offset": m.next_offset,
                "last_stable_offset": m.last_stable_offset,
                "lag": m.lag,
                "dead_letters": m.dead_letters,
                "lag_s": None if m.lag_s is None else round(m.lag_s, 3),
            }
            for m in report.mirror
        ],
        "checks": {"max_lag": options.max_lag, "max_age_s": options.max_age_s, "failed": failed},
    }
    return json.dumps(document, indent=2)


def _schema_state(schema: SchemaRevision) -> str:
    if schema.up_to_date or schema.compatible:
        return schema.state()
    return schema.problem() or "unknown"


def _limits(options: StatusOptions) -> str:
    given = []
    if options.max_lag is not None:
        given.append(f"--max-lag {options.max_lag:,}")
    if options.max_age_s is not None:
        given.append(f"--max-age {options.max_age_s:g}")
    return ", ".join(given)


def _time(moment: datetime, timespec: str) -> str:
    return moment.astimezone(UTC).isoformat(timespec=timespec)
