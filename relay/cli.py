"""`relay` command line: a thin layer over the typed API.

Domain errors become one line on stderr and the error's exit code; ``--traceback``
shows the stack. Passwords never appear in output.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from types import FrameType

from relay import logs
from relay.config import RelaySettings, load_settings
from relay.errors import ConfigurationError, RelayError
from relay.mirror.cli import add_mirror_command
from relay.secrets import Secret, mask_text, mask_url

log = logging.getLogger("relay")


def _partition_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated partition numbers, got {text!r}"
        ) from None


def add_connection_flags(parser: argparse.ArgumentParser, kafka: bool = True) -> None:
    group = parser.add_argument_group("connections (flags win over RELAY_* environment)")
    group.add_argument("--database-url", metavar="URL", help="PostgreSQL URL [RELAY_DATABASE_URL]")
    if not kafka:
        return
    group.add_argument(
        "--kafka-bootstrap-servers",
        metavar="HOSTS",
        help="Kafka bootstrap servers [RELAY_KAFKA_BOOTSTRAP_SERVERS]",
    )
    group.add_argument(
        "-X",
        dest="kafka_properties",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="any librdkafka property, e.g. -X security.protocol=SASL_SSL (repeatable) "
        "[RELAY_KAFKA_PROPERTIES='a=b;c=d']",
    )
    group.add_argument(
        "--kafka-timeout",
        dest="kafka_timeout_s",
        type=float,
        metavar="SECONDS",
        help="how long to wait for the broker at start-up [RELAY_KAFKA_TIMEOUT_S=15]",
    )
    group.add_argument(
        "--kafka-config-file",
        metavar="FILE",
        help="librdkafka properties file, one name=value per line [RELAY_KAFKA_CONFIG_FILE]",
    )


def add_relay_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("relay (flags win over RELAY_* environment)")
    group.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="rows per Kafka transaction [RELAY_BATCH_SIZE=5000]",
    )
    group.add_argument(
        "--poll-interval",
        dest="poll_interval_s",
        type=float,
        metavar="SECONDS",
        help="pause when nothing is pending [RELAY_POLL_INTERVAL_S=0.5]",
    )
    group.add_argument(
        "--retry-attempts",
        type=int,
        metavar="N",
        help="with --once and in Spark: give up a batch after N failed attempts "
        "[RELAY_RETRY_ATTEMPTS=8]; `relay run` retries for ever",
    )
    group.add_argument(
        "--transaction-timeout-ms",
        type=int,
        metavar="MS",
        help="Kafka transaction.timeout.ms [RELAY_TRANSACTION_TIMEOUT_MS=60000]",
    )
    group.add_argument(
        "--transactional-id-prefix",
        metavar="PREFIX",
        help="transactional.id = PREFIX-<partition> [RELAY_TRANSACTIONAL_ID_PREFIX=outbox-relay]",
    )
    group.add_argument(
        "--positions-topic",
        metavar="TOPIC",
        help="topic whose offsets hold the positions "
        "[RELAY_POSITIONS_TOPIC=outbox-relay-positions]",
    )
    group.add_argument(
        "--positions-group",
        metavar="GROUP",
        help="consumer group holding the positions, one per outbox database "
        "[RELAY_POSITIONS_GROUP=outbox-relay-positions]",
    )
    group.add_argument(
        "--no-cleanup",
        dest="cleanup",
        action="store_const",
        const=False,
        help="keep published rows in the outbox table [RELAY_CLEANUP=true]",
    )
    group.add_argument(
        "--partitions",
        type=_partition_list,
        metavar="P,P,...",
        help="only these relay partitions, e.g. 0,1,2 (default: all)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relay",
        description="Exactly-once transactional outbox relay between PostgreSQL and Kafka.",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="publish committed outbox rows to Kafka")
    run.add_argument(
        "--once",
        action="store_true",
        help="publish everything committed when it started, then exit 0",
    )
    add_connection_flags(run)
    add_relay_flags(run)
    run.set_defaults(handler=_cmd_run)

    db = commands.add_parser("db", help="database schema (Alembic migrations)")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade = db_commands.add_parser("upgrade", help="apply migrations")
    upgrade.add_argument("revision", nargs="?", default="head")
    downgrade = db_commands.add_parser("downgrade", help="revert migrations")
    downgrade.add_argument("revision", help="target revision, e.g. base or -1")
    current = db_commands.add_parser("current", help="show the applied revision")
    roles = db_commands.add_parser(
        "roles",
        help="create the least-privilege roles outbox_writer, outbox_relay, outbox_mirror "
        "(if missing) and grant them what they need",
    )
    roles.add_argument(
        "--mirror-tables",
        type=lambda text: [t.strip() for t in text.split(",") if t.strip()],
        default=[],
        metavar="T,T,...",
        help="also let outbox_mirror write these mirrored tables",
    )
    roles.set_defaults(handler=_cmd_db_roles)
    for sub in (upgrade, downgrade, current, roles):
        add_connection_flags(sub, kafka=False)
    upgrade.set_defaults(handler=_cmd_db_upgrade)
    downgrade.set_defaults(handler=_cmd_db_downgrade)
    current.set_defaults(handler=_cmd_db_current)

    add_mirror_command(commands)

    dev = commands.add_parser("dev", help="local PostgreSQL and Kafka for development")
    dev.add_argument("action", choices=["up", "down", "status"])
    dev.set_defaults(handler=_cmd_dev)

    from relay.chaos.cli import add_chaos_command

    add_chaos_command(commands)
    return parser


def settings_from_args(args: argparse.Namespace) -> RelaySettings:
    """``load_settings`` picks its own names from the flags and ignores the rest."""
    return load_settings(vars(args), kafka_pairs=getattr(args, "kafka_properties", []))


def _database_url(args: argparse.Namespace) -> Secret:
    import os

    from relay.config import check_database_url

    url = args.database_url or os.environ.get("RELAY_DATABASE_URL")
    if not url:
        raise ConfigurationError("no database: set RELAY_DATABASE_URL or --database-url")
    return Secret(check_database_url(url))


def _cmd_run(args: argparse.Namespace) -> int:
    from relay.relay_service import ProcessRelay

    settings = settings_from_args(args)
    log.info("starting: %s", settings.describe())
    relay = ProcessRelay(settings, args.partitions)
    stop_on_signals(relay.stop_event.set)
    summary = relay.run(once=args.once)
    log.info(
        "published %d records (%s)",
        summary.records,
        ", ".join(f"p{r.partition}: {r.records} up to seq {r.position}" for r in summary.results),
    )
    return 0


def stop_on_signals(stop: Callable[[], None], then: str = "finishing the current batch") -> None:
    """On SIGTERM or SIGINT, log ``received <signal>, <then>`` and call ``stop``."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, %s", signal.Signals(signum).name, then)
        stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    from relay.postgres import migrations

    url = _database_url(args)
    migrations.upgrade(url, args.revision)
    log.info("database %s upgraded to %s", mask_url(url.reveal()), args.revision)
    return 0


def _cmd_db_downgrade(args: argparse.Namespace) -> int:
    from relay.postgres import migrations

    url = _database_url(args)
    migrations.downgrade(url, args.revision)
    log.info("database %s downgraded to %s", mask_url(url.reveal()), args.revision)
    return 0


def _cmd_db_current(args: argparse.Namespace) -> int:
    from relay.postgres import migrations
    from relay.postgres.database import make_engine

    url = _database_url(args)
    engine = make_engine(url, pool_size=1)
    try:
        current = migrations.current_revision(engine, url)
    finally:
        engine.dispose()
    head = migrations.head_revision(url)
    state = "up to date" if current == head else f"needs upgrade to {head}"
    print(f"{current or '(empty)'} ({state})")
    return 0


def _cmd_db_roles(args: argparse.Namespace) -> int:
    from relay.postgres.database import make_engine
    from relay.postgres.roles import grant_roles

    url = _database_url(args)
    engine = make_engine(url, pool_size=1)
    try:
        grant_roles(engine, url, args.mirror_tables)
    finally:
        engine.dispose()
    log.info(
        "roles outbox_writer, outbox_relay, outbox_mirror granted on %s", mask_url(url.reveal())
    )
    return 0


def _cmd_dev(args: argparse.Namespace) -> int:
    from relay import devenv

    if args.action == "up":
        print(devenv.describe(devenv.up()))
    elif args.action == "down":
        devenv.down()
        print("stopped")
    else:
        print(devenv.status())
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
