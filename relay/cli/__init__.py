"""`relay` command line: a thin shell over the command API (:mod:`relay.commands`).

One module per subcommand registers its parser here and nowhere else. Domain errors
become one line on stderr and the error's exit code (:mod:`relay.errors`);
``--traceback`` shows the stack. Passwords never appear in output.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence

from relay import __version__
from relay.cli import chaos, db, dead_letters, dev, mirror, positions, run, status
from relay.errors import RelayError
from relay.runtime import logs
from relay.runtime.secrets import mask_text
from relay.settings.flags import add_log_level_flag

SUBCOMMANDS = (run, mirror, positions, status, dead_letters, db, dev, chaos)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relay",
        description="Exactly-once transactional outbox relay between PostgreSQL and Kafka.",
    )
    add_log_level_flag(parser)
    parser.add_argument("--version", action="version", version=f"relay {__version__}")
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for subcommand in SUBCOMMANDS:
        subcommand.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except RelayError as exc:
        if args.traceback:
            traceback.print_exc()
        print(f"relay: error: {mask_text(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


__all__ = ["build_parser", "main"]
