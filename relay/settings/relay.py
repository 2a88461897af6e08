"""The forward relay's settings (`relay run`, `relay positions`, the outbox Spark job):
each declared once in :data:`RELAY`, on top of the connections
(:mod:`relay.settings.connections`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from relay.errors import ConfigurationError
from relay.runtime.secrets import Secret
from relay.settings.connections import (
    KAFKA,
    METRICS,
    METRICS_HOST,
    METRICS_PORT,
    Connections,
    KafkaSettings,
    load_connections,
    metrics_shown,
)
from relay.settings.spec import (
    Given,
    Setting,
    boolean,
    describe,
    kafka_name,
    names,
    non_empty,
    seconds,
    uri_reference,
    whole,
)

# How a database's default prefix is computed (migration 0004 writes it to outbox_identity).
DATABASE_PREFIX = "outbox-relay-<first 8 hex digits of its id>"
_BEFORE_0004 = "if it had events before migration 0004"

TRANSACTIONAL_ID_PREFIX = Setting(
    "transactional_id_prefix",
    "RELAY_TRANSACTIONAL_ID_PREFIX",
    "--transactional-id-prefix",
    non_empty,
    help="transactional.id = PREFIX-<partition>",
    default_doc=f"the database's, {DATABASE_PREFIX} (outbox-relay {_BEFORE_0004})",
    metavar="PREFIX",
)
POSITIONS_TOPIC = Setting(
    "positions_topic",
    "RELAY_POSITIONS_TOPIC",
    "--positions-topic",
    non_empty,
    "outbox-relay-positions",
    "topic whose offsets hold the positions",
    metavar="TOPIC",
)
POSITIONS_GROUP = Setting(
    "positions_group",
    "RELAY_POSITIONS_GROUP",
    "--positions-group",
    non_empty,
    help="consumer group holding the positions, one per outbox database",
    default_doc=f"the database's, {DATABASE_PREFIX}-positions (outbox-relay-positions "
    f"{_BEFORE_0004})",
    metavar="GROUP",
)
BATCH_SIZE = Setting(
    "batch_size",
    "RELAY_BATCH_SIZE",
    "--batch-size",
    whole,
    5000,
    "rows per Kafka transaction",
    metavar="N",
)
BATCH_BYTES = Setting(
    "batch_bytes",
    "RELAY_BATCH_BYTES",
    "--batch-bytes",
    whole,
    16 * 1024 * 1024,
    "keys and values per Kafka transaction, at most (one row always goes)",
    metavar="BYTES",
)
POLL_INTERVAL = Setting(
    "poll_interval_s",
    "RELAY_POLL_INTERVAL_S",
    "--poll-interval",
    seconds,
    0.5,
    "with nothing pending, look again after this long at the latest",
    metavar="SECONDS",
)
COMMIT_WATCH = Setting(
    "commit_watch_s",
    "RELAY_COMMIT_WATCH_S",
    "--commit-watch",
    seconds,
    0.01,
    "`relay run`: draw the positions of newly committed events this often, and publish them "
    "at once",
    metavar="SECONDS",
)
RETRY_ATTEMPTS = Setting(
    "retry_attempts",
    "RELAY_RETRY_ATTEMPTS",
    "--retry-attempts",
    whole,
    8,
    "with --once and in Spark: give up a batch after N failed attempts (`relay run` "
    "retries for ever)",
    metavar="N",
)
POSITION_REFRESH = Setting(
    "position_refresh_s",
    "RELAY_POSITION_REFRESH_S",
    "--position-refresh",
    seconds,
    3600.0,
    "re-commit an idle relay partition's position this often, well within the broker's "
    "offsets.retention.minutes",
    metavar="SECONDS",
)
MEMBER_SESSION_TIMEOUT = Setting(
    "member_session_timeout_ms",
    "RELAY_MEMBER_SESSION_TIMEOUT_MS",
    "--member-session-timeout-ms",
    whole,
    10_000,
    "`relay run` without --partitions: a member silent this long loses its relay "
    "partitions to the others",
    metavar="MS",
)
MISSING_TOPIC_WAIT = Setting(
    "missing_topic_wait_s",
    "RELAY_MISSING_TOPIC_WAIT_S",
    "--missing-topic-wait",
    seconds,
    60.0,
    "a row whose topic does not exist (or may not be written) holds its relay partition "
    "this long, then goes to outbox_dead_letters and publishing goes on",
    metavar="SECONDS",
)
CLEANUP = Setting(
    "cleanup",
    "RELAY_CLEANUP",
    "--no-cleanup",
    boolean,
    True,
    "keep published rows in the outbox table",
    const=False,
)
HEARTBEAT_TOPICS = Setting(
    "heartbeat_topics",
    "RELAY_HEARTBEAT_TOPICS",
    "--heartbeat-topics",
    names,
    (),
    "send heartbeats (complete-through times for the mirror's freshness) to every "
    "partition of these topics (a,b); their other consumers must skip them "
    "(header relay-heartbeat)",
    metavar="TOPICS",
)
HEARTBEAT_INTERVAL = Setting(
    "heartbeat_interval_s",
    "RELAY_HEARTBEAT_INTERVAL_S",
    "--heartbeat-interval",
    seconds,
    5.0,
    "with --heartbeat-topics: each relay partition sends at most one heartbeat this often",
    metavar="SECONDS",
)
FENCE_MEMBERS = Setting(
    "fence_members",
    "RELAY_FENCE_MEMBERS",
    "--fence-members",
    boolean,
    False,
    "with --once or --partitions (and in the Spark job): run even while `relay run "
    "--partition-transactions` processes share the relay partitions through their members "
    "group (they are fenced, and stall and log errors until this run ends); refused "
    "otherwise, and always beside processes with one transaction per process (the default)",
    const=True,
)
PROCESS_TRANSACTIONS = Setting(
    "process_transactions",
    "RELAY_PROCESS_TRANSACTIONS",
    "--partition-transactions",
    boolean,
    True,
    "`relay run` without --once or --partitions: one Kafka transaction per relay partition "
    "and batch, each partition fenced by a transactional id of its own, the processes "
    "sharing the partitions through the members group. The default "
    "(RELAY_PROCESS_TRANSACTIONS=true): one transaction per process and cycle for every "
    "relay partition it holds, fenced by the positions group's generation (KIP-447). "
    "Every process of an outbox takes the same setting",
    const=False,
)
MEMBER_ID = Setting(
    "member_id",
    "RELAY_MEMBER_ID",
    "--member-id",
    kafka_name,
    help="with one transaction per process (the default): this process's name in the "
    "positions group, stable across its restarts (a StatefulSet pod's name, say): it "
    "keeps its relay partitions over a restart within the session timeout, and a restart "
    "aborts the transaction its killed predecessor left open at once. Each process needs "
    "its own; a second process with the same name stops the first",
    default_doc="none: a random transactional id per start",
    metavar="NAME",
)
CLOUDEVENTS_TOPICS = Setting(
    "cloudevents_topics",
    "RELAY_CLOUDEVENTS_TOPICS",
    "--cloudevents-topics",
    names,
    (),
    "publish the records of these topics (a,b) as CloudEvents 1.0 in binary mode: ce_* "
    "headers added by the relay (ce_time: the commit time); their rows need an event type",
    metavar="TOPICS",
)
CLOUDEVENTS_SOURCE = Setting(
    "cloudevents_source",
    "RELAY_CLOUDEVENTS_SOURCE",
    "--cloudevents-source",
    uri_reference,
    help="the ce_source (a URI-reference) of the records of --cloudevents-topics",
    default_doc="the outbox database's URL without user or password, postgresql://host:port/db",
    metavar="URI",
)

RELAY = (
    TRANSACTIONAL_ID_PREFIX,
    POSITIONS_TOPIC,
    POSITIONS_GROUP,
    BATCH_SIZE,
    BATCH_BYTES,
    POLL_INTERVAL,
    COMMIT_WATCH,
    RETRY_ATTEMPTS,
    POSITION_REFRESH,
    MEMBER_SESSION_TIMEOUT,
    CLEANUP,
    HEARTBEAT_TOPICS,
    HEARTBEAT_INTERVAL,
    MISSING_TOPIC_WAIT,
    FENCE_MEMBERS,
    PROCESS_TRANSACTIONS,
    MEMBER_ID,
    CLOUDEVENTS_TOPICS,
    CLOUDEVENTS_SOURCE,
)
"""The relay's own settings, by field of :class:`RelaySettings`."""

RELAY_FLAGS = (*RELAY, KAFKA.transaction_timeout_ms)
"""The flags of the relay's group in help (the transaction timeout is the cluster's)."""


@dataclass(frozen=True, slots=True)
class RelaySettings:
    connections: Connections  # the database and the Kafka cluster, as the mirror's
    transactional_id_prefix: str | None = TRANSACTIONAL_ID_PREFIX.default  # None: the database's
    positions_topic: str = POSITIONS_TOPIC.default
    positions_group: str | None = POSITIONS_GROUP.default  # None: the database's
    batch_size: int = BATCH_SIZE.default
    batch_bytes: int = BATCH_BYTES.default
    poll_interval_s: float = POLL_INTERVAL.default
    commit_watch_s: float = COMMIT_WATCH.default
    cleanup: bool = CLEANUP.default
    retry_attempts: int = RETRY_ATTEMPTS.default
    position_refresh_s: float = POSITION_REFRESH.default
    member_session_timeout_ms: int = MEMBER_SESSION_TIMEOUT.default
    heartbeat_topics: tuple[str, ...] = HEARTBEAT_TOPICS.default
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL.default
    missing_topic_wait_s: float = MISSING_TOPIC_WAIT.default
    fence_members: bool = FENCE_MEMBERS.default
    process_transactions: bool = PROCESS_TRANSACTIONS.default
    member_id: str | None = MEMBER_ID.default  # None: a random transactional id per start
    cloudevents_topics: tuple[str, ...] = CLOUDEVENTS_TOPICS.default
    cloudevents_source: str | None = CLOUDEVENTS_SOURCE.default  # None: the database's URL
    metrics_port: int | None = METRICS_PORT.default  # None: no /metrics, /healthz, /readyz
    metrics_host: str = METRICS_HOST.default

    @property
    def database_url(self) -> Secret:
        return self.connections.database_url

    @property
    def kafka(self) -> KafkaSettings:
        return self.connections.kafka

    def with_database_defaults(self, default_prefix: str) -> RelaySettings:
        """The prefix and positions group the database chose (``outbox_identity``) where
        none is set, so that two databases never share them by accident."""
        return replace(
            self,
            transactional_id_prefix=self.transactional_id_prefix or default_prefix,
            positions_group=self.positions_group or f"{default_prefix}-positions",
        )

    @property
    def prefix(self) -> str:
        """The transactional-id prefix, once :meth:`with_database_defaults` has run."""
        if self.transactional_id_prefix is None:
            raise ConfigurationError("the transactional-id prefix is not resolved yet")
        return self.transactional_id_prefix

    @property
    def group(self) -> str:
        """The positions group, once :meth:`with_database_defaults` has run."""
        if self.positions_group is None:
            raise ConfigurationError("the positions group is not resolved yet")
        return self.positions_group

    @property
    def members_group(self) -> str:
        """The consumer group whose members share the relay partitions (`relay run`)."""
        return f"{self.group}.members"

    def transactional_id(self, partition: int) -> str:
        return f"{self.prefix}-{partition}"

    def describe(self) -> dict[str, str]:
        """The settings as text that is safe to log."""
        return {
            **self.connections.describe(),
            **describe(RELAY, self),
            "metrics": metrics_shown(self.metrics_host, self.metrics_port),
        }


def load_settings(
    flags: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None
) -> RelaySettings:
    """Settings from the flags (``vars(args)``; None: not given) over ``RELAY_*``."""
    given = Given(flags, environ)
    return RelaySettings(
        load_connections(given),
        **given.values(RELAY),
        **given.values(METRICS),
    )
