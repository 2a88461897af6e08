"""`relay db`: migrations (upgrade, downgrade, current) and the least-privilege roles."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from relay.runtime.secrets import mask_url
from relay.settings.env_flags import env_flag
from relay.settings.flags import add_connection_flags, database_url_from_args

log = logging.getLogger("relay")


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser = subparsers.add_parser("db", help="database schema (Alembic migrations)")
    actions = parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade = actions.add_parser("upgrade", help="apply migrations")
    upgrade.add_argument("revision", nargs="?", default="head")
    upgrade.set_defaults(handler=_upgrade)
    downgrade = actions.add_parser("downgrade", help="revert migrations")
    downgrade.add_argument("revision", help="target revision, e.g. base or -1")
    downgrade.set_defaults(handler=_downgrade)
    current = actions.add_parser("current", help="show the applied revision")
    current.set_defaults(handler=_current)
    roles = actions.add_parser(
        "roles",
        help="create the least-privilege roles outbox_writer, outbox_relay, outbox_mirror "
        "(if missing) and grant them what they need",
    )
    env_flag(
        roles,
        "--mirror-tables",
        env="RELAY_DB_MIRROR_TABLES",
        default=(),
        type=lambda text: [t.strip() for t in text.split(",") if t.strip()],
        metavar="T,T,...",
        help="also let outbox_mirror write these mirrored tables",
    )
    roles.set_defaults(handler=_roles)
    partitions = actions.add_parser(
        "partitions",
        help="change the relay partition count (refused while committed rows wait to be "
        "published: publish them first, with writers paused)",
    )
    partitions.add_argument("count", type=int, help="the new number of relay partitions")
    partitions.set_defaults(handler=_partitions)
    for action in (upgrade, downgrade, current, roles, partitions):
        add_connection_flags(action, kafka=False)


def _upgrade(args: argparse.Namespace) -> int:
    from relay.commands import db

    url = database_url_from_args(args)
    db.upgrade(url, args.revision)
    log.info("database %s upgraded to %s", mask_url(url.reveal()), args.revision)
    return 0


def _downgrade(args: argparse.Namespace) -> int:
    from relay.commands import db

    url = database_url_from_args(args)
    db.downgrade(url, args.revision)
    log.info("database %s downgraded to %s", mask_url(url.reveal()), args.revision)
    return 0


def _current(args: argparse.Namespace) -> int:
    from relay.commands import db

    revision = db.current(database_url_from_args(args))
    print(f"{revision.current or '(empty)'} ({revision.state()})")
    return 0


def _roles(args: argparse.Namespace) -> int:
    from relay.commands import db

    url = database_url_from_args(args)
    db.roles(url, args.mirror_tables)
    log.info(
        "roles outbox_writer, outbox_relay, outbox_mirror granted on %s", mask_url(url.reveal())
    )
    return 0


def _partitions(args: argparse.Namespace) -> int:
    from relay.commands import db

    before, barrier = db.set_partitions(database_url_from_args(args), args.count)
    log.info("relay partitions: %d -> %d", before, args.count)
    if barrier is not None:
        log.info(
            "rows above position %d wait until every row up to it is published, so that "
            "each key's events stay in order",
            barrier,
        )
    return 0
