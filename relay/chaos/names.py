"""The names a chaos run uses, apart from the code that acts on them (so that the CLI can
offer them without loading the harness): the fault kinds, the workload's topic and tables."""

from __future__ import annotations

from enum import StrEnum


class FaultKind(StrEnum):
    KILL9_RELAY = "kill9_relay"
    KILL9_MIRROR = "kill9_mirror"
    KILL9_SPARK = "kill9_spark"
    KILL9_BROKER = "kill9_broker"
    RESTART_POSTGRES = "restart_postgres"
    PAUSE_RELAY = "pause_relay"
    PAUSE_MIRROR = "pause_mirror"
    KILL9_REPLICATOR = "kill9_replicator"
    PAUSE_REPLICATOR = "pause_replicator"
    KILL9_TARGET_BROKER = "kill9_target_broker"
    # An operator's change the replicator refuses, then the documented way out
    # (relay.chaos.replica_faults).
    RECREATE_SOURCE_TOPIC = "recreate_source_topic"
    DELETE_REPLICATOR_GROUP = "delete_replicator_group"
    # A source cluster of its own lost, a consumer group failed over (relay.chaos.failover).
    LOSE_SOURCE_CLUSTER = "lose_source_cluster"


REPLICA_KINDS = frozenset(
    {
        FaultKind.KILL9_REPLICATOR,
        FaultKind.PAUSE_REPLICATOR,
        FaultKind.KILL9_TARGET_BROKER,
        FaultKind.RECREATE_SOURCE_TOPIC,
        FaultKind.DELETE_REPLICATOR_GROUP,
        FaultKind.LOSE_SOURCE_CLUSTER,
    }
)
"""The kinds that need the replicator and the second cluster (``--replicate on``)."""

ON_REQUEST_KINDS = frozenset({FaultKind.LOSE_SOURCE_CLUSTER})
"""The kinds a run injects only when ``--kinds`` names them: each starts a broker of its
own (a minute of a small machine), too slow for the default run's time limit."""

DEFAULT_KINDS = tuple(k for k in FaultKind if k not in ON_REQUEST_KINDS)

# The workload's topic, its tables and its events' type.
TOPIC = "chaos-accounts"
ACCOUNTS = "chaos_accounts"
LEDGER = "chaos_ledger"
MIRROR = "chaos_accounts_mirror"
HISTORY = "chaos_accounts_history"  # the same events, every version (history scd2)
EVENT_TYPE = "AccountChanged"
# A topic written straight to Kafka (not through the outbox) and replicated too, for the
# fault that deletes and creates a source topic again (the outbox's topic must stay).
INGEST_TOPIC = "chaos-ingest"
