"""`relay chaos` (workload + faults + checker) and `relay chaos check` (the checker alone)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from relay.chaos.names import (
    DEFAULT_KINDS,
    HISTORY,
    MIRROR,
    ON_REQUEST_KINDS,
    REPLICA_KINDS,
    TOPIC,
    FaultKind,
)
from relay.cli.signals import interrupt_on_sigterm
from relay.errors import ChaosError, ConfigurationError, DevEnvError
from relay.runtime.clock import SystemClock
from relay.settings.env_flags import env_flag
from relay.settings.flags import add_connection_flags, relay_settings_from_args

ANOMALIES_EXIT_CODE = 1
ENV = "RELAY_CHAOS_"


def _kinds(text: str) -> tuple[FaultKind, ...]:
    try:
        return tuple(FaultKind(part.strip()) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected fault kinds out of {', '.join(k.value for k in FaultKind)}"
        ) from None


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    chaos = subparsers.add_parser(
        "chaos",
        help="prove exactly-once under faults: workload, faults and an independent checker",
        description="Runs its own PostgreSQL and Kafka, and a second Kafka cluster (free "
        "ports, a working directory of its own), writers through the write API, `relay "
        "run`, `relay mirror`, `relay replicate` to the second cluster and runs of both "
        "Spark jobs; injects faults; drains; checks. Exit 0 only when the checker finds "
        "nothing lost, duplicated, out of order, wrongly visible, mirrored or replicated "
        "wrong.",
    )
    env_flag(chaos, "--faults", env=f"{ENV}FAULTS", default=200, type=int, help="faults to inject")
    env_flag(
        chaos, "--seed", env=f"{ENV}SEED", default=7, type=int, help="seed of workload and faults"
    )
    env_flag(
        chaos,
        "--duration-limit",
        env=f"{ENV}DURATION_LIMIT_S",
        default=780.0,
        type=float,
        metavar="SECONDS",
        help="stop injecting faults after this long",
    )
    env_flag(
        chaos,
        "--kinds",
        env=f"{ENV}KINDS",
        default=DEFAULT_KINDS,
        shown="all but " + ", ".join(sorted(k.value for k in ON_REQUEST_KINDS)),
        type=_kinds,
        metavar="K,K,...",
        help="fault kinds: " + ", ".join(k.value for k in FaultKind),
    )
    env_flag(chaos, "--writers", env=f"{ENV}WRITERS", default=6, type=int, help="writer threads")
    env_flag(
        chaos,
        "--workdir",
        env=f"{ENV}WORKDIR",
        type=Path,
        help="servers, logs and faults.jsonl (default .relay-dev/chaos/run-<time>)",
    )
    env_flag(
        chaos,
        "--keep-workdir",
        env=f"{ENV}KEEP_WORKDIR",
        default=False,
        action="store_true",
        help="keep server data and process logs after a passing run",
    )
    env_flag(
        chaos,
        "--synchronous-commit",
        env=f"{ENV}SYNCHRONOUS_COMMIT",
        default="on",
        choices=["on", "off"],
        help="synchronous_commit of the outbox database; with off, a PostgreSQL crash "
        "loses commits the relay may already have published (see docs/chaos.md)",
    )
    env_flag(
        chaos,
        "--partition-transactions",
        env=f"{ENV}PARTITION_TRANSACTIONS",
        default=False,
        action="store_true",
        help="run `relay run --partition-transactions` (one Kafka transaction per relay "
        "partition) instead of the default, and the Spark relay job beside it, which fences "
        "such relays (beside the default ones it is refused, so it runs only with this)",
    )
    env_flag(
        chaos,
        "--replicate",
        env=f"{ENV}REPLICATE",
        default="on",
        choices=["on", "off"],
        help="run a second Kafka cluster and `relay replicate` of the topic to it, with "
        "its faults (" + ", ".join(sorted(k.value for k in REPLICA_KINDS)) + "), and "
        "check the replica; off leaves all of that out",
    )
    env_flag(
        chaos,
        "--report",
        env=f"{ENV}REPORT",
        type=Path,
        metavar="FILE",
        help="write a JSON report",
    )
    chaos.set_defaults(handler=_cmd_chaos)

    actions = chaos.add_subparsers(dest="chaos_action", metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="the independent checker alone",
        description="Reads the topic from the beginning (read_committed) and the workload's "
        "ledger, accounts and mirror tables, and the topic's replica on another cluster "
        "if asked; prints one summary line; exit 0 only when every count is zero.",
    )
    env_flag(check, "--topic", env=f"{ENV}TOPIC", default=TOPIC, help="the workload's topic")
    env_flag(
        check,
        "--mirror-table",
        env=f"{ENV}MIRROR_TABLE",
        metavar="TABLE",
        help=f"compare this mirrored table with the accounts, e.g. {MIRROR} (default: skip)",
    )
    env_flag(
        check,
        "--history-table",
        env=f"{ENV}HISTORY_TABLE",
        metavar="TABLE",
        help=f"compare this history-mode (scd2) table with every version the ledger holds, "
        f"e.g. {HISTORY} (default: skip)",
    )
    env_flag(
        check,
        "--timeout",
        env=f"{ENV}TIMEOUT_S",
        default=120.0,
        type=float,
        metavar="SECONDS",
        help="reading limit",
    )
    env_flag(
        check,
        "--replica-bootstrap-servers",
        env=f"{ENV}REPLICA_BOOTSTRAP_SERVERS",
        metavar="HOSTS",
        help="compare the topic's replica on this cluster (relay replicate's target, "
        "PLAINTEXT) with the topic (default: skip)",
    )
    env_flag(
        check,
        "--replica-topic",
        env=f"{ENV}REPLICA_TOPIC",
        metavar="TOPIC",
        shown="the topic",
        help="the replica's topic (relay replicate's --target-prefix + the topic)",
    )
    env_flag(
        check,
        "--replica-source-alias",
        env=f"{ENV}REPLICA_SOURCE_ALIAS",
        metavar="NAME",
        shown="any",
        help="the relay-source-cluster header every copy must carry",
    )
    add_connection_flags(check)
    check.set_defaults(handler=_cmd_check)


def _cmd_chaos(args: argparse.Namespace) -> int:
    from relay.chaos.config import ChaosConfig  # the harness loads only when a run starts
    from relay.chaos.harness import ChaosRun
    from relay.chaos.workload import WorkloadConfig

    if args.faults < 0 or args.writers < 1 or args.duration_limit <= 0:
        raise ConfigurationError("--faults >= 0, --writers >= 1 and --duration-limit > 0")
    config = ChaosConfig(
        faults=args.faults,
        seed=args.seed,
        duration_limit_s=args.duration_limit,
        kinds=args.kinds,
        workdir=args.workdir,
        keep_workdir=args.keep_workdir,
        workload=WorkloadConfig(writers=args.writers),
        synchronous_commit=args.synchronous_commit == "on",
        replicate=args.replicate == "on",
        partition_transactions=args.partition_transactions,
    )
    run = ChaosRun(config, _print, SystemClock(), lambda: datetime.now(UTC))
    interrupt_on_sigterm()  # stop processes and servers on the way out
    try:
        report = run.run()
    except DevEnvError as exc:
        raise ChaosError(f"the chaos run's own servers failed: {exc}") from None
    for line in report.lines():
        print(line, flush=True)
    if args.report is not None:
        args.report.write_text(json.dumps(report.as_json(), indent=2) + "\n")
    return 0 if report.ok else ANOMALIES_EXIT_CODE


def _cmd_check(args: argparse.Namespace) -> int:
    from relay.chaos.checker_inputs import KafkaAccess, ReplicaAccess, check

    replica = None
    if args.replica_bootstrap_servers:
        replica = ReplicaAccess(
            KafkaAccess(args.replica_bootstrap_servers, {}),
            args.replica_topic or args.topic,
            args.replica_source_alias or None,
        )
    settings = relay_settings_from_args(args)
    result = check(
        settings,
        args.topic,
        args.mirror_table,
        args.timeout,
        replica=replica,
        history_table=args.history_table,
    )
    for kind, examples in sorted(result.examples.items()):
        for example in examples:
            print(f"  {kind}: {example}")
    print(result.summary_line(), flush=True)
    return 0 if result.ok else ANOMALIES_EXIT_CODE


def _print(line: str) -> None:
    print(line, flush=True)
