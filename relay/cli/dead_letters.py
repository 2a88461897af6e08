"""`relay dead-letters list|show|replay|discard`: the dead letters of the outbox (``--outbox``,
the default) and of the mirror (``--mirror``). Replay and discard change nothing without
``--yes``: they print what they would do."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from relay.errors import ConfigurationError, ConfirmationRequiredError, DeadLetterError
from relay.runtime.secrets import Secret, mask_text
from relay.settings.env_flags import add_yes_flag, env_flag
from relay.settings.flags import add_connection_flags, add_mirror_flags, database_url_from_args
from relay.settings.spec import choice

if TYPE_CHECKING:
    from relay.commands import dead_letters
    from relay.commands.dead_letters import DeadLetterRow, Selection, Source

OUTPUTS = ("text", "json")
SOURCES = ("outbox", "mirror")
ENV = "RELAY_DEAD_LETTERS_"
_ERROR_WIDTH = 120  # of an error in a listing (show prints it all)


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser = subparsers.add_parser(
        "dead-letters",
        help="list, show, replay or discard the dead letters of the outbox (--outbox) or of "
        "the mirror (--mirror)",
    )
    actions = parser.add_subparsers(dest="dead_letters_action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the dead letters, oldest first")
    env_flag(listing, "--limit", env=f"{ENV}LIMIT", type=int, metavar="N", help="at most N")
    env_flag(listing, "--topic", env=f"{ENV}TOPIC", metavar="T", help="only those of topic T")
    env_flag(
        listing,
        "--output",
        env=f"{ENV}OUTPUT",
        default="text",
        choices=OUTPUTS,
        type=str.lower,
        help="text or json (one object)",
    )
    listing.set_defaults(handler=_list)
    show = actions.add_parser("show", help="everything stored with one dead letter")
    show.add_argument("id", type=int)
    env_flag(
        show,
        "--full",
        env=f"{ENV}FULL",
        default=False,
        action="store_true",
        help="keys, values and headers in full",
    )
    show.set_defaults(handler=_show)
    replay = actions.add_parser(
        "replay",
        help="outbox: write the row to the outbox again (a new event, published once by the "
        "relay); mirror: apply the record again, version-guarded (needs the mapping); "
        "the dead letter goes, or stays with its new error; needs --yes",
    )
    replay.set_defaults(handler=_replay)
    discard = actions.add_parser("discard", help="delete dead letters for good; needs --yes")
    discard.set_defaults(handler=_discard)
    for action in (replay, discard):
        action.add_argument("ids", type=int, nargs="*", metavar="ID")
        env_flag(
            action,
            "--all",
            env=f"{ENV}ALL",
            default=False,
            action="store_true",
            help="every dead letter (of --topic)",
        )
        env_flag(
            action,
            "--topic",
            env=f"{ENV}TOPIC",
            metavar="T",
            help="with --all: only those of topic T",
        )
        add_yes_flag(action, "do it (without: list them, change nothing)")
    for action in (listing, show, replay, discard):
        which = action.add_mutually_exclusive_group()
        for source in SOURCES:
            env_flag(
                which,
                f"--{source}",
                env=f"{ENV}SOURCE",
                default="outbox",
                parse=choice(*SOURCES),
                dest="source",
                action="store_const",
                const=source,
                help=f"the {source}'s dead letters",
            )
        add_connection_flags(action, kafka=False)
        add_mirror_flags(action)  # --group selects the mirror's; replay needs --mapping


def _mirror(args: argparse.Namespace) -> dead_letters.MirrorOptions:
    from relay.commands import dead_letters

    return dead_letters.load_mirror_options(vars(args))


def _selection(args: argparse.Namespace, *, every: bool = False) -> Selection:
    from relay.commands.dead_letters import Selection

    if not every and bool(args.ids) == bool(args.all):
        raise ConfigurationError("give the dead letters' ids, or --all")
    ids = None if every or args.all else tuple(args.ids)
    group = _mirror(args).group if args.source == "mirror" else None
    return Selection(ids, args.topic, group)


def _list(args: argparse.Namespace) -> int:
    from relay.commands import dead_letters

    rows = dead_letters.list_dead_letters(
        database_url_from_args(args), args.source, _selection(args, every=True), args.limit
    )
    render = render_json if args.output == "json" else render_text
    print(render(args.source, rows))
    return 0


def _show(args: argparse.Namespace) -> int:
    from relay.commands import dead_letters

    letter = dead_letters.show(database_url_from_args(args), args.source, args.id)
    for name, shown in dead_letters.describe(letter, args.full):
        print(f"{name + ':':<18} {shown}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from relay.commands import dead_letters

    url, source, selection = database_url_from_args(args), args.source, _selection(args)
    mirror = _mirror(args)
    dead_letters.replay_mapping(source, mirror)  # a missing mapping: before anything else
    selection = dead_letters.replay_selection(url, source, selection)  # a key's together
    if not _confirmed(args.yes, url, source, selection, "replay"):
        return 0
    results = dead_letters.replay(url, source, selection, mirror)
    done = "back in the outbox as a new row" if source == "outbox" else "applied"
    failed = 0
    for result in results:
        if result.found and result.error is None:
            print(f"{source} dead letter {result.id}: {done}")
            continue
        failed += 1
        why = f"kept: {result.error}" if result.found else "not found"
        print(f"relay: {source} dead letter {result.id}: {mask_text(why)}", file=sys.stderr)
    if failed:
        raise DeadLetterError(f"{failed} of {_count(len(results), source)} not replayed")
    if not results:
        print(f"no {source} dead letters")
    return 0


def _discard(args: argparse.Namespace) -> int:
    from relay.commands import dead_letters

    url, source, selection = database_url_from_args(args), args.source, _selection(args)
    if not _confirmed(args.yes, url, source, selection, "discard"):
        return 0
    discarded = dead_letters.discard(url, source, selection)
    print(f"discarded {_count(len(discarded.deleted), source)}")
    for missing in discarded.missing:
        print(f"relay: {source} dead letter {missing}: not found", file=sys.stderr)
    if discarded.missing:
        raise DeadLetterError(f"{len(discarded.missing)} ids are not {source} dead letters")
    return 0


def _confirmed(yes: bool, url: Secret, source: Source, selection: Selection, doing: str) -> bool:
    """With ``yes``, True; without, list the selected dead letters and raise (changing
    nothing), or False when there are none."""
    from relay.commands import dead_letters

    if yes:
        return True
    rows = dead_letters.list_dead_letters(url, source, selection)
    missing = sorted(set(selection.ids or ()) - {row.id for row in rows})
    if missing:
        raise DeadLetterError(f"not {source} dead letters: {', '.join(map(str, missing))}")
    if not rows:
        print(f"no {source} dead letters")
        return False
    print(render_text(source, rows))
    raise ConfirmationRequiredError(
        f"nothing changed: run it again with --yes to {doing} {_count(len(rows), source)}"
    )


def _count(number: int, source: Source) -> str:
    return f"{number} {source} dead letter{'' if number == 1 else 's'}"


def render_text(source: Source, rows: list[DeadLetterRow]) -> str:
    from relay.commands import dead_letters

    if source == "outbox":
        lines = [f"{'id':>8} {'partition':>9} {'seq':>12} {'outbox id':>12}  {'topic':<30}"]
    else:
        lines = [f"{'id':>8} {'group':<20} {'topic[partition]':<34} {'offset':>12}"]
    lines[0] += f"  {'dead-lettered at':<29}  error"
    for row in rows:
        if source == "outbox":
            where = f"{row.partition:>9} {row.position:>12} {row.outbox_id:>12}  {row.topic:<30}"
        else:
            at = f"{row.topic}[{row.partition}]"
            where = f"{row.group or '':<20} {at:<34} {row.position:>12}"
        error = " ".join(row.error.split())
        if len(error) > _ERROR_WIDTH:
            error = error[: _ERROR_WIDTH - 3] + "..."
        lines.append(f"{row.id:>8} {where}  {dead_letters.shown_time(row.at):<29}  {error}")
    return "\n".join(lines)


def render_json(source: Source, rows: list[DeadLetterRow]) -> str:
    """One object: ``source`` and ``dead_letters``; keys are only ever added."""
    from relay.commands import dead_letters

    position, extra = ("seq", "outbox_id") if source == "outbox" else ("offset", "group")
    letters = [
        {
            "id": row.id,
            "topic": row.topic,
            "partition": row.partition,
            position: row.position,
            extra: row.outbox_id if source == "outbox" else row.group,
            "error": row.error,
            "dead_lettered_at": dead_letters.shown_time(row.at),
        }
        for row in rows
    ]
    return json.dumps({"source": source, "dead_letters": letters}, indent=2)
