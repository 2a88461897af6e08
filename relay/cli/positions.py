"""`relay positions show|restore|set`: each relay partition's position, the way out when
the positions group's offsets expired or were deleted, and setting one by hand."""

from __future__ import annotations

import argparse
from typing import Any

from relay.errors import ConfirmationRequiredError
from relay.settings.env_flags import add_yes_flag
from relay.settings.flags import add_connection_flags, add_relay_flags, relay_settings_from_args


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser = subparsers.add_parser(
        "positions", help="show relay partitions' positions, or restore lost ones"
    )
    actions = parser.add_subparsers(dest="positions_action", required=True, metavar="ACTION")
    show = actions.add_parser(
        "show", help="each relay partition's position in Kafka and the database's floor"
    )
    show.set_defaults(handler=_show)
    restore = actions.add_parser(
        "restore",
        help="commit the database's floor as the position where Kafka's is below it "
        "(after the positions group's offsets expired or were deleted); stop the relays first",
    )
    restore.set_defaults(handler=_restore)
    set_ = actions.add_parser(
        "set",
        help="commit a position by hand (and make it the floor), fencing a relay running on "
        "the partition; rows at or below it are never published, rows above it are "
        "published again; needs --yes",
    )
    set_.add_argument("--partition", type=int, required=True, metavar="P", help="relay partition")
    set_.add_argument(
        "--position",
        type=int,
        required=True,
        metavar="N",
        help="the seq of the last row to count as published (0: none)",
    )
    add_yes_flag(set_, "do it (without: say what it would do, change nothing)")
    set_.set_defaults(handler=_set)
    for action in (show, restore, set_):
        add_connection_flags(action)
        add_relay_flags(action)


def _show(args: argparse.Namespace) -> int:
    from relay.commands import positions

    print(f"{'partition':>9} {'position':>12} {'floor':>12}  committed by")
    for row in positions.show(relay_settings_from_args(args), args.partitions):
        owner = (
            "-"
            if row.owner is None
            else f"database {row.owner.database_id}, prefix {row.owner.transactional_id_prefix}"
        )
        print(f"{row.partition:>9} {row.position:>12} {row.floor:>12}  {owner}")
    return 0


def _restore(args: argparse.Namespace) -> int:
    from relay.commands import positions

    for row in positions.restore(relay_settings_from_args(args), args.partitions):
        if row.restored:
            print(f"relay partition {row.partition}: position {row.found} -> {row.floor}")
        else:
            print(
                f"relay partition {row.partition}: position {row.found} (floor {row.floor}), kept"
            )
    return 0


def _set(args: argparse.Namespace) -> int:
    from relay.commands import positions

    settings = relay_settings_from_args(args)
    partition, position = args.partition, args.position
    if not args.yes:
        (now,) = positions.show(settings, [partition])
        print(
            f"relay partition {partition}: position {now.position} (floor {now.floor}) "
            f"would be set to {position}, and the floor to {position}"
        )
        print(positions.set_warning(partition, position))
        raise ConfirmationRequiredError("nothing changed: run it again with --yes to set it")
    done = positions.set_position(settings, partition, position)
    print(
        f"relay partition {done.partition}: position {done.found} -> {done.position} "
        f"(floor {done.floor} -> {done.position})"
    )
    return 0
