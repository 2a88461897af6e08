"""The replicator's settings, declared once: the two clusters' connections and each
``RELAY_REPLICATE_*`` variable with its flag, parser, default and help (the typed
settings built from them are relay.settings.replicate's).

The source and the target cluster each have their own connection, so each can have its
own SASL and SSL properties::

    RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS   --source-bootstrap-servers
    RELAY_REPLICATE_SOURCE_PROPERTIES='a=b;c=d'   --source-property NAME=VALUE
    RELAY_REPLICATE_SOURCE_CONFIG_FILE         --source-config-file
    (the same with TARGET / --target-...)
"""

from __future__ import annotations

import re

from relay.settings.connections import (
    cluster,
    kafka_timeouts,
)
from relay.settings.spec import (
    Invalid,
    Setting,
    boolean,
    choice,
    names,
    non_empty,
    seconds,
    seconds_or_zero,
    text,
    whole,
)

# Consumer properties the replicator sets itself on the source: its guarantees need them.
SOURCE_OWNED_PROPERTIES = frozenset(
    {"auto.offset.reset", "enable.auto.offset.store", "enable.partition.eof"}
)

_TIMEOUTS = kafka_timeouts("RELAY_REPLICATE_", "target", "either cluster")
SOURCE = cluster(
    "RELAY_REPLICATE_SOURCE_", "--source-", "--source-property", "the source cluster", _TIMEOUTS
)
TARGET = cluster(
    "RELAY_REPLICATE_TARGET_", "--target-", "--target-property", "the target cluster", _TIMEOUTS
)


def regex(raw: str) -> str:
    non_empty(raw)
    try:
        re.compile(raw)
    except re.error as exc:
        raise Invalid(f"is not a regular expression: {exc}") from None
    return raw


TOPICS = Setting(
    "topics",
    "RELAY_REPLICATE_TOPICS",
    "--topics",
    names,
    (),
    "source topics to replicate",
    metavar="A,B",
)
TOPIC_PATTERN = Setting(
    "pattern",
    "RELAY_REPLICATE_TOPIC_PATTERN",
    "--topic-pattern",
    regex,
    help="also every source topic whose whole name matches REGEX, those created later included",
    metavar="REGEX",
)
TARGET_PREFIX = Setting(
    "target_prefix",
    "RELAY_REPLICATE_TARGET_PREFIX",
    "--target-prefix",
    text,
    "",
    "target topic = PREFIX + source topic",
    metavar="PREFIX",
)
SELECTION = (TOPICS, TOPIC_PATTERN, TARGET_PREFIX)
"""Which topics, by field of :class:`TopicSelection`."""

LEGACY_GROUP = "relay-replicate"
"""The fixed default group of earlier versions: kept where it holds positions."""
SOURCE_GROUP = "relay-replicate-<the source cluster's id>"
TARGET_CODECS = ("source", "none", "gzip", "snappy", "lz4", "zstd")
"""``--target-compression``: a codec, or ``source`` (follow the source topic's)."""

REPLICATE = (
    Setting(
        "source_alias",
        "RELAY_REPLICATE_SOURCE_ALIAS",
        "--source-alias",
        non_empty,
        help="the source's name in the relay-source-cluster header and in the positions",
        default_doc="the source cluster's id",
        metavar="NAME",
    ),
    Setting(
        "group_name",
        "RELAY_REPLICATE_GROUP",
        "--group",
        non_empty,
        help="group on the target cluster holding each source partition's position",
        default_doc=f"{SOURCE_GROUP} ({LEGACY_GROUP} where that group holds positions of "
        "the selected topics on the target)",
        metavar="NAME",
    ),
    Setting(
        "transactional_id_prefix",
        "RELAY_REPLICATE_TRANSACTIONAL_ID_PREFIX",
        "--transactional-id-prefix",
        non_empty,
        help="transactional.id = PREFIX-<target topic>-<partition>",
        default_doc="the group",
        metavar="PREFIX",
    ),
    Setting(
        "batch_size",
        "RELAY_REPLICATE_BATCH_SIZE",
        "--batch-size",
        whole,
        5000,
        "records per target transaction",
        metavar="N",
    ),
    Setting(
        "batch_bytes",
        "RELAY_REPLICATE_BATCH_BYTES",
        "--batch-bytes",
        whole,
        16 * 1024 * 1024,
        "keys and values per target transaction, at most",
        metavar="BYTES",
    ),
    Setting(
        "max_wait_s",
        "RELAY_REPLICATE_MAX_WAIT_S",
        "--max-wait",
        seconds,
        0.05,
        "longest a read waits for a source record",
        metavar="SECONDS",
    ),
    Setting(
        "topic_refresh_s",
        "RELAY_REPLICATE_TOPIC_REFRESH_S",
        "--topic-refresh",
        seconds,
        30.0,
        "look for new source topics and partitions this often",
        metavar="SECONDS",
    ),
    Setting(
        "replication_factor",
        "RELAY_REPLICATE_REPLICATION_FACTOR",
        "--replication-factor",
        whole,
        help="of the target topics it creates",
        default_doc="the target broker's default",
        metavar="N",
    ),
    Setting(
        "retry_attempts",
        "RELAY_REPLICATE_RETRY_ATTEMPTS",
        "--retry-attempts",
        whole,
        8,
        "with --once and in Spark: give up a batch after N failed attempts",
        metavar="N",
    ),
    Setting(
        "position_refresh_s",
        "RELAY_REPLICATE_POSITION_REFRESH_S",
        "--position-refresh",
        seconds,
        3600.0,
        "re-commit an idle partition's position this often, well within the target's "
        "offsets.retention.minutes",
        metavar="SECONDS",
    ),
    Setting(
        "heartbeat_interval_s",
        "RELAY_REPLICATE_HEARTBEAT_INTERVAL_S",
        "--heartbeat-interval",
        seconds_or_zero,
        5.0,
        "read each source partition's last stable offset this often, to learn the time "
        "its copy is complete through (relay_replicate_lag_seconds, also while the source "
        "is idle; the positions carry it); 0: never",
        metavar="SECONDS",
    ),
    Setting(
        "target_compression",
        "RELAY_REPLICATE_TARGET_COMPRESSION",
        "--target-compression",
        choice(*TARGET_CODECS),
        "source",
        "the target producer's compression.type; source: the source topic's "
        "compression.type, lz4 where that is 'producer' (a record may fit the source only "
        "compressed)",
        metavar="CODEC",
    ),
    Setting(
        "member_session_timeout_ms",
        "RELAY_REPLICATE_MEMBER_SESSION_TIMEOUT_MS",
        "--member-session-timeout-ms",
        whole,
        10_000,
        "without --once: an instance silent this long loses its source partitions to the "
        "other instances of the group",
        metavar="MS",
    ),
    Setting(
        "fence_members",
        "RELAY_REPLICATE_FENCE_MEMBERS",
        "--fence-members",
        boolean,
        False,
        "with --once (and in the Spark job): run even while `relay replicate` instances "
        "share the source partitions through their members group (they are fenced, and "
        "stall and log errors until this run ends); refused otherwise",
        const=True,
    ),
    Setting(
        "sync_groups",
        "RELAY_REPLICATE_SYNC_GROUPS",
        "--sync-groups",
        names,
        (),
        "consumer groups whose committed source offsets are translated and committed for "
        "them on the target cluster while it runs (never while one consumes there), so "
        "that a failover needs nothing more (relay replicate only)",
        metavar="G1,G2",
    ),
    Setting(
        "sync_interval_s",
        "RELAY_REPLICATE_SYNC_INTERVAL_S",
        "--sync-interval",
        seconds,
        5.0,
        "with --sync-groups: sync each group this often",
        metavar="SECONDS",
    ),
)
"""The replicator's own settings, by field of :class:`ReplicateSettings`."""
