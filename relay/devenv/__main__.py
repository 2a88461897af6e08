"""``python -m relay.devenv up|down|status [--workdir DIR]``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from relay.errors import DevEnvError

from . import describe_endpoints, describe_status, down, status, up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m relay.devenv",
        description="Start, stop or inspect the local PostgreSQL and Kafka servers.",
    )
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="state directory (default: $RELAY_DEV_DIR or ./.relay-dev)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        help="seconds to wait for each server to start (default: 90)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="only print warnings")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        if args.command == "up":
            endpoints = up(args.workdir, timeout=args.timeout)
            print(describe_endpoints(endpoints, args.workdir))
        elif args.command == "down":
            down(args.workdir)
            print("development servers stopped")
        else:
            st = status(args.workdir)
            print(describe_status(st))
            return 0 if st.up else 3
    except DevEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
