"""Command-line flags shared by the CLI and the Spark jobs, and the settings they give.

Each flag is a setting of :mod:`relay.settings.loader`'s one rule: it wins over the
``RELAY_*`` variable of the same name. The CLI (:mod:`relay.cli`) and ``jobs/*.py`` add
these to their parsers; neither defines a flag of its own for a setting.
"""

from __future__ import annotations

import argparse
import os

from relay.errors import ConfigurationError
from relay.runtime.secrets import Secret
from relay.settings.env_flags import add_log_flags, env_flag
from relay.settings.loader import positive_float
from relay.settings.mirror import MirrorSettings, load_mirror_settings
from relay.settings.relay import RelaySettings, check_database_url, load_settings


def partition_list(text: str) -> list[int]:
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
        "--batch-bytes",
        type=int,
        metavar="BYTES",
        help="keys and values per Kafka transaction, at most (one row always goes) "
        "[RELAY_BATCH_BYTES=16777216]",
    )
    group.add_argument(
        "--poll-interval",
        dest="poll_interval_s",
        type=float,
        metavar="SECONDS",
        help="with nothing pending, look again after this long at the latest "
        "[RELAY_POLL_INTERVAL_S=0.5]",
    )
    group.add_argument(
        "--commit-watch",
        dest="commit_watch_s",
        type=float,
        metavar="SECONDS",
        help="`relay run`: look for newly committed events this often, and publish them at "
        "once [RELAY_COMMIT_WATCH_S=0.01]",
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
        "--position-refresh",
        dest="position_refresh_s",
        type=float,
        metavar="SECONDS",
        help="re-commit an idle relay partition's position this often, well within the "
        "broker's offsets.retention.minutes [RELAY_POSITION_REFRESH_S=3600]",
    )
    group.add_argument(
        "--member-session-timeout-ms",
        dest="member_session_timeout_ms",
        type=int,
        metavar="MS",
        help="`relay run` without --partitions: a member silent this long loses its relay "
        "partitions to the others [RELAY_MEMBER_SESSION_TIMEOUT_MS=10000]",
    )
    group.add_argument(
        "--no-cleanup",
        dest="cleanup",
        action="store_const",
        const=False,
        help="keep published rows in the outbox table [RELAY_CLEANUP=true]",
    )
    env_flag(
        group,
        "--partitions",
        env="RELAY_PARTITIONS",
        type=partition_list,
        metavar="P,P,...",
        help="only these relay partitions, e.g. 0,1,2 (default: all)",
    )


def add_mirror_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("mirror")
    group.add_argument(
        "--mapping",
        dest="mirror_config",
        metavar="FILE",
        help="topic-to-table mapping, TOML [RELAY_MIRROR_CONFIG]",
    )
    group.add_argument(
        "--group",
        dest="mirror_group",
        metavar="NAME",
        help="consumer group; its offsets live in mirror_offsets [RELAY_MIRROR_GROUP=relay-mirror]",
    )
    group.add_argument(
        "--batch-size",
        dest="mirror_batch_size",
        type=int,
        metavar="N",
        help="records of one partition per database transaction [RELAY_MIRROR_BATCH_SIZE=2000]",
    )
    group.add_argument(
        "--max-wait",
        dest="mirror_max_wait_s",
        type=float,
        metavar="SECONDS",
        help="longest a fetched record waits for its batch [RELAY_MIRROR_MAX_WAIT_S=0.5]",
    )
    group.add_argument(
        "--topics",
        dest="mirror_topics",
        metavar="A,B",
        help="only these mapped topics (default: all) [RELAY_MIRROR_TOPICS]",
    )
    group.add_argument(
        "--record-retries",
        dest="mirror_record_retries",
        type=int,
        metavar="N",
        help="tries of a record the database refuses with an error that may heal (a foreign "
        "key whose parent has not arrived) before it is dead-lettered "
        "[RELAY_MIRROR_RECORD_RETRIES=10]",
    )


def add_metrics_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("metrics and health (flags win over RELAY_* environment)")
    group.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus /metrics, /healthz and /readyz on this port "
        "[RELAY_METRICS_PORT; unset: off]",
    )
    group.add_argument(
        "--metrics-host",
        metavar="HOST",
        help="the address to serve them on [RELAY_METRICS_HOST=0.0.0.0, every interface]",
    )


def add_once_flag(container: argparse._ActionsContainer, what: str) -> None:
    """``--once``: do ``what`` (everything committed when the run started), then exit 0.
    ``container`` is a parser or a group of one (e.g. mutually exclusive modes)."""
    env_flag(
        container,
        "--once",
        env="RELAY_ONCE",
        default=False,
        action="store_true",
        help=f"{what}, then exit 0",
    )


def add_progress_flag(container: argparse._ActionsContainer) -> None:
    """``--progress-interval``: how often a run that is meant to finish logs its progress
    when stderr is not a terminal (on a terminal it shows a live progress bar)."""
    env_flag(
        container,
        "--progress-interval",
        dest="progress_interval_s",
        env="RELAY_PROGRESS_INTERVAL_S",
        default=10.0,
        type=_seconds,
        metavar="SECONDS",
        help="with --once (and in the Spark jobs), log the rows done, the rate and the ETA "
        "this often when stderr is not a terminal",
    )


def _seconds(text: str) -> float:
    try:
        return positive_float("--progress-interval", text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    """What a Spark job's driver takes besides the settings."""
    env_flag(
        parser,
        "--master",
        env="RELAY_SPARK_MASTER",
        shown="spark-submit's, else local[*]",
        help="Spark master",
    )
    add_log_flags(parser)
    add_progress_flag(parser)


def relay_settings_from_args(args: argparse.Namespace) -> RelaySettings:
    """``load_settings`` picks its own names from the flags and ignores the rest."""
    return load_settings(vars(args), kafka_pairs=getattr(args, "kafka_properties", []))


def mirror_settings_from_args(args: argparse.Namespace) -> MirrorSettings:
    overrides = {
        "config": args.mirror_config,
        "group": args.mirror_group,
        "batch_size": args.mirror_batch_size,
        "max_wait_s": args.mirror_max_wait_s,
        "topics": args.mirror_topics,
        "record_retries": args.mirror_record_retries,
    }
    return load_mirror_settings(relay_settings_from_args(args), overrides)


def database_url_from_args(args: argparse.Namespace) -> Secret:
    """The database URL alone, for commands that need no broker (``relay db``)."""
    url = args.database_url or os.environ.get("RELAY_DATABASE_URL")
    if not url:
        raise ConfigurationError("no database: set RELAY_DATABASE_URL or --database-url")
    return Secret(check_database_url(url))
