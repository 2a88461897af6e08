"""`relay positions show|restore`: each relay partition's position, and the way out when
the positions group's offsets expired or were deleted."""

from __future__ import annotations

import argparse
from typing import Any

from relay.commands import positions
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
    for action in (show, restore):
        add_connection_flags(action)
        add_relay_flags(action)


def _show(args: argparse.Namespace) -> int:
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
    for row in positions.restore(relay_settings_from_args(args), args.partitions):
        if row.restored:
            print(f"relay partition {row.partition}: position {row.found} -> {row.floor}")
        else:
            print(
                f"relay partition {row.partition}: position {row.found} (floor {row.floor}), kept"
            )
    return 0
