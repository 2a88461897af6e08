"""`relay dev up|down|status`: local PostgreSQL and two Kafka clusters, for development."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser = subparsers.add_parser(
        "dev", help="local PostgreSQL and two Kafka clusters for development"
    )
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.set_defaults(handler=_dev)


def _dev(args: argparse.Namespace) -> int:
    from relay import devenv

    if args.action == "up":
        print(devenv.describe(devenv.up()))
    elif args.action == "down":
        devenv.down()
        print("stopped")
    else:
        print(devenv.status())
    return 0
