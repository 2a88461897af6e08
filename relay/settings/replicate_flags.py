"""`relay replicate`'s and ``jobs/replicate.py``'s flags: each is a setting of
:mod:`relay.settings.replicate`, and wins over its ``RELAY_REPLICATE_*`` variable."""

from __future__ import annotations

import argparse

from relay.settings.replicate import ReplicateSettings, load_replicate_settings

_CLUSTERS = ("source", "target")


def add_replicate_flags(parser: argparse.ArgumentParser) -> None:
    for cluster in _CLUSTERS:
        _add_cluster_flags(parser, cluster)
    group = parser.add_argument_group("replication (flags win over RELAY_REPLICATE_* environment)")
    group.add_argument(
        "--topics",
        dest="replicate_topics",
        metavar="A,B",
        help="source topics to replicate [RELAY_REPLICATE_TOPICS]",
    )
    group.add_argument(
        "--topic-pattern",
        dest="replicate_topic_pattern",
        metavar="REGEX",
        help="also every source topic whose whole name matches REGEX, those created later "
        "included [RELAY_REPLICATE_TOPIC_PATTERN]",
    )
    group.add_argument(
        "--target-prefix",
        dest="replicate_target_prefix",
        metavar="PREFIX",
        help="target topic = PREFIX + source topic [RELAY_REPLICATE_TARGET_PREFIX='']",
    )
    group.add_argument(
        "--source-alias",
        dest="replicate_source_alias",
        metavar="NAME",
        help="the source's name in the relay-source-cluster header and in the positions "
        "[RELAY_REPLICATE_SOURCE_ALIAS=the source cluster's id]",
    )
    group.add_argument(
        "--group",
        dest="replicate_group",
        metavar="NAME",
        help="group on the target cluster holding each source partition's position "
        "[RELAY_REPLICATE_GROUP=relay-replicate]",
    )
    group.add_argument(
        "--transactional-id-prefix",
        dest="replicate_transactional_id_prefix",
        metavar="PREFIX",
        help="transactional.id = PREFIX-<target topic>-<partition> "
        "[RELAY_REPLICATE_TRANSACTIONAL_ID_PREFIX=the group]",
    )
    group.add_argument(
        "--batch-size",
        dest="replicate_batch_size",
        type=int,
        metavar="N",
        help="records per target transaction [RELAY_REPLICATE_BATCH_SIZE=5000]",
    )
    group.add_argument(
        "--batch-bytes",
        dest="replicate_batch_bytes",
        type=int,
        metavar="BYTES",
        help="keys and values per target transaction, at most "
        "[RELAY_REPLICATE_BATCH_BYTES=16777216]",
    )
    group.add_argument(
        "--max-wait",
        dest="replicate_max_wait_s",
        type=float,
        metavar="SECONDS",
        help="longest a read waits for a source record [RELAY_REPLICATE_MAX_WAIT_S=0.05]",
    )
    group.add_argument(
        "--topic-refresh",
        dest="replicate_topic_refresh_s",
        type=float,
        metavar="SECONDS",
        help="look for new source topics and partitions this often "
        "[RELAY_REPLICATE_TOPIC_REFRESH_S=30]",
    )
    group.add_argument(
        "--replication-factor",
        dest="replicate_replication_factor",
        type=int,
        metavar="N",
        help="of the target topics it creates [RELAY_REPLICATE_REPLICATION_FACTOR=the "
        "target broker's default]",
    )
    group.add_argument(
        "--retry-attempts",
        dest="replicate_retry_attempts",
        type=int,
        metavar="N",
        help="with --once and in Spark: give up a batch after N failed attempts "
        "[RELAY_REPLICATE_RETRY_ATTEMPTS=8]",
    )
    group.add_argument(
        "--position-refresh",
        dest="replicate_position_refresh_s",
        type=float,
        metavar="SECONDS",
        help="re-commit an idle partition's position this often, well within the target's "
        "offsets.retention.minutes [RELAY_REPLICATE_POSITION_REFRESH_S=3600]",
    )
    group.add_argument(
        "--transaction-timeout-ms",
        dest="replicate_transaction_timeout_ms",
        type=int,
        metavar="MS",
        help="target transaction.timeout.ms [RELAY_REPLICATE_TRANSACTION_TIMEOUT_MS=60000]",
    )
    group.add_argument(
        "--kafka-timeout",
        dest="replicate_kafka_timeout_s",
        type=float,
        metavar="SECONDS",
        help="how long to wait for either cluster at start-up [RELAY_REPLICATE_KAFKA_TIMEOUT_S=15]",
    )


def _add_cluster_flags(parser: argparse.ArgumentParser, cluster: str) -> None:
    upper = f"RELAY_REPLICATE_{cluster.upper()}"
    group = parser.add_argument_group(f"{cluster} cluster (flags win over {upper}_*)")
    group.add_argument(
        f"--{cluster}-bootstrap-servers",
        metavar="HOSTS",
        help=f"{cluster} cluster's bootstrap servers [{upper}_BOOTSTRAP_SERVERS]",
    )
    group.add_argument(
        f"--{cluster}-property",
        dest=f"{cluster}_properties",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help=f"any librdkafka property for the {cluster} cluster, e.g. "
        f"security.protocol=SASL_SSL (repeatable) [{upper}_PROPERTIES='a=b;c=d']",
    )
    group.add_argument(
        f"--{cluster}-config-file",
        metavar="FILE",
        help=f"librdkafka properties file for the {cluster} cluster [{upper}_CONFIG_FILE]",
    )


def replicate_settings_from_args(args: argparse.Namespace) -> ReplicateSettings:
    given = vars(args)
    overrides: dict[str, object] = {
        name.removeprefix("replicate_"): value
        for name, value in given.items()
        if name.startswith("replicate_")
    }
    for name in ("metrics_port", "metrics_host"):  # every command's (add_metrics_flags)
        overrides[name] = given.get(name)
    for cluster in _CLUSTERS:
        for name in ("bootstrap_servers", "config_file"):
            overrides[f"{cluster}_{name}"] = given.get(f"{cluster}_{name}")
    return load_replicate_settings(
        overrides,
        source_pairs=given.get("source_properties") or (),
        target_pairs=given.get("target_properties") or (),
    )
