"""Command-line flags shared by the CLI and the Spark jobs, and the settings they give.

Each group of flags is made from a table of :class:`~relay.settings.spec.Setting` (the
connections, the relay's, the mirror's, the replicator's, metrics): the flag's ``dest`` is
its variable's name, so every family reads ``vars(args)`` the same way, flags winning over
``RELAY_*``. The CLI (:mod:`relay.cli`) and ``jobs/*.py`` add these to their parsers;
neither defines a flag of its own for a setting.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Iterable

from relay.runtime.secrets import Secret
from relay.settings.connections import CONNECTIONS, DATABASE_URL, METRICS, load_database_url
from relay.settings.env_flags import add_log_flags, env_flag
from relay.settings.mirror import MIRROR, MirrorSettings, load_mirror_settings
from relay.settings.registry import REGISTRY
from relay.settings.relay import RELAY_FLAGS, RelaySettings, load_settings
from relay.settings.replicate import ReplicateSettings, load_replicate_settings
from relay.settings.replicate_spec import REPLICATE, SELECTION, SOURCE, TARGET
from relay.settings.spec import Setting, add_flags, seconds

_FLAGS_WIN = "flags win over RELAY_* environment"


def _group(parser: argparse.ArgumentParser, title: str, settings: Iterable[Setting]) -> None:
    add_flags(parser.add_argument_group(title), settings)


def partition_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated partition numbers, got {text!r}"
        ) from None


def add_connection_flags(parser: argparse.ArgumentParser, kafka: bool = True) -> None:
    _group(parser, f"connections ({_FLAGS_WIN})", CONNECTIONS if kafka else (DATABASE_URL,))


def add_relay_flags(
    parser: argparse.ArgumentParser, only: Collection[Setting] | None = None
) -> None:
    """The relay's flags (``only``: just these of them, for a command that reads no more)."""
    group = parser.add_argument_group(f"relay ({_FLAGS_WIN})")
    add_flags(group, RELAY_FLAGS if only is None else [s for s in RELAY_FLAGS if s in only])
    env_flag(
        group,
        "--partitions",
        env="RELAY_PARTITIONS",
        type=partition_list,
        metavar="P,P,...",
        help="only these relay partitions, e.g. 0,1,2 (default: all)",
    )


def add_mirror_flags(
    parser: argparse.ArgumentParser, only: Collection[Setting] | None = None
) -> None:
    """The mirror's flags (``only``: just these of them)."""
    _group(
        parser,
        f"mirror ({_FLAGS_WIN})",
        MIRROR if only is None else [s for s in MIRROR if s in only],
    )
    if only is None:  # the registry of tables whose format is avro or json_schema
        _group(parser, f"schema registry ({_FLAGS_WIN})", REGISTRY)


def add_replicate_flags(parser: argparse.ArgumentParser) -> None:
    for name, cluster in (("source", SOURCE), ("target", TARGET)):
        _group(parser, f"{name} cluster ({_FLAGS_WIN})", cluster.settings)
    _group(
        parser,
        f"replication ({_FLAGS_WIN})",
        (*SELECTION, *REPLICATE, SOURCE.transaction_timeout_ms, SOURCE.kafka_timeout_s),
    )


def add_metrics_flags(parser: argparse.ArgumentParser) -> None:
    _group(parser, f"metrics and health ({_FLAGS_WIN})", METRICS)


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
        parse=seconds,
        metavar="SECONDS",
        help="with --once (and in the Spark jobs), log the rows done, the rate and the ETA "
        "this often when stderr is not a terminal",
    )


def add_summary_flag(container: argparse._ActionsContainer) -> None:
    """``--log-summary``: how often a long-running `relay run` or `relay replicate` logs
    what it published (each batch is logged at DEBUG only)."""
    env_flag(
        container,
        "--log-summary",
        dest="log_summary_s",
        env="RELAY_LOG_SUMMARY_S",
        default=60.0,
        parse=seconds,
        metavar="SECONDS",
        help="without --once, log what was published (counts, transactions, the seq or "
        "offset range of each partition) this often while publishing; each batch is "
        "logged at DEBUG",
    )


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
    return load_settings(vars(args))


def mirror_settings_from_args(args: argparse.Namespace) -> MirrorSettings:
    return load_mirror_settings(vars(args))


def database_url_from_args(args: argparse.Namespace) -> Secret:
    """The database URL alone, for commands that need no broker (``relay db``)."""
    return load_database_url(vars(args))


def replicate_settings_from_args(args: argparse.Namespace) -> ReplicateSettings:
    return load_replicate_settings(vars(args))
