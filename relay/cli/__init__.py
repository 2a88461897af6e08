"""`relay` command line: a thin shell over the command API (:mod:`relay.commands`).

One module per subcommand registers its parser here and nowhere else. The global flags
(``--log-level``, ``--log-format``, ``--traceback``) go before or after the subcommand,
and every flag has a ``RELAY_*`` variable (:mod:`relay.settings.env_flags`). Domain errors
become one line on stderr and the error's exit code (:mod:`relay.errors`); ``--traceback``
shows the stack. Passwords never appear in output.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence

from relay import __version__
from relay.cli import (
    chaos,
    completion,
    db,
    dead_letters,
    dev,
    mirror,
    positions,
    replicate,
    run,
    status,
)
from relay.errors import RelayError
from relay.runtime import logs
from relay.runtime.secrets import mask_text
from relay.settings.env_flags import add_global_flags, apply_environment, share_global_flags

SUBCOMMANDS = (run, mirror, replicate, positions, status, dead_letters, db, dev, chaos, completion)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relay",
        description="Exactly-once transactional outbox relay between PostgreSQL and Kafka.",
    )
    add_global_flags(parser)
    parser.add_argument("--version", action="version", version=f"relay {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for subcommand in SUBCOMMANDS:
        subcommand.register(commands)
    share_global_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    completion.complete(parser)
    args = parser.parse_args(argv)
    as_json = False  # until the logs are set up: the error as a plain line
    try:
        apply_environment(parser, args)
        logs.configure(args.log_level, log_format=args.log_format)
        as_json = args.log_format == "json"
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except RelayError as exc:
        if as_json:  # one object a line, the stack in its "exception" field
            logs.log_error(f"relay: error: {exc}", exc, exc.exit_code, traceback=args.traceback)
        else:
            if args.traceback:
                traceback.print_exc()
            print(f"relay: error: {mask_text(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not as_json:
            raise
        logs.log_error(f"relay: error: {exc!r}", exc, 1, traceback=True)  # a bug: its stack
        return 1


__all__ = ["build_parser", "main"]
