"""What `relay run` and the Spark job do before publishing: the start-up checks, the
relay partitions to run, the defaults the database chose, and building one relay
partition's :class:`~relay.publishing.partition_relay.PartitionRelay`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from relay.commands.shared_run import refuse_beside
from relay.errors import ConfigurationError, KafkaError
from relay.kafka.admin import admin_client, check_broker, ensure_positions_topic, topic_partitions
from relay.kafka.member_publisher import MemberPartitionPublisher
from relay.kafka.member_transactions import MemberTransactions
from relay.kafka.membership import active_members
from relay.kafka.publisher import KafkaTransactionalPublisher
from relay.postgres.engine import Database
from relay.postgres.migrations import check_schema
from relay.postgres.outbox_partitions import relay_partitions, stranded_rows
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.publishing.cloudevents import CloudEvents, CloudEventsPublisher
from relay.publishing.partition_relay import PartitionRelay
from relay.publishing.ports import RelayObserver, TransactionalPublisher
from relay.publishing.traced import TracedPublisher
from relay.publishing.types import PositionOwner
from relay.runtime import tracing
from relay.runtime.clock import Clock
from relay.runtime.failpoints import Failpoints
from relay.runtime.retry import RetryPolicy
from relay.settings.relay import RelaySettings

log = logging.getLogger(__name__)


def check_environment(settings: RelaySettings, database: Database) -> int:
    """Fail fast on an unreachable database or broker, or a schema that is not current.

    Creates the positions topic when it is missing. Returns the relay partition count.
    """
    with database.connect("connecting"):
        pass
    check_schema(database)
    partitions = relay_partitions(database)
    stranded = stranded_rows(database, partitions)
    if stranded:
        raise ConfigurationError(
            f"the outbox holds {stranded} rows in relay partitions {partitions} and above, "
            f"beyond the count of {partitions} (outbox_settings.partitions): they would never "
            "be published. Set the count back (relay db partitions N) and publish them first"
        )
    admin = admin_client(settings.kafka)
    check_broker(admin, settings.kafka)
    ensure_positions_topic(
        admin, settings.positions_topic, partitions, settings.kafka.request_timeout_s
    )
    for topic in settings.heartbeat_topics:
        if topic_partitions(admin, topic, settings.kafka.request_timeout_s) is None:
            raise KafkaError(
                f"heartbeat topic {topic} (--heartbeat-topics, RELAY_HEARTBEAT_TOPICS) does "
                "not exist in Kafka"
            )
    return partitions


def _members_seen(settings: RelaySettings, group: str, what: str) -> int:
    """The active members of ``group``; 0, with a warning, when this principal may not
    describe it (one allowed only its own groups: the check cannot tell, the start goes
    on, as in :func:`relay.commands.shared_run.refuse_beside`)."""
    try:
        return active_members(settings, group)
    except KafkaError as exc:
        if exc.code != "GROUP_AUTHORIZATION_FAILED":
            raise
        log.warning(
            "%s: cannot tell whether processes of group %s are running: %s", what, group, exc
        )
        return 0


def refuse_beside_members(settings: RelaySettings, what: str, *, fenced: bool = False) -> None:
    """A run of its own (``what``: ``relay run --once``, the Spark job, ...) fences the
    `relay run` processes that share the partitions through their members group: they
    stall and log errors while it runs. Refused while the group has members, unless
    ``--fence-members``. ``settings`` as :func:`for_database` returns them.

    Processes with one transaction per process (the default) are members of the
    positions group itself, and no transactional id of theirs can be fenced by a run of
    its own: beside them it is refused even with ``--fence-members``. This is checked
    again after the run's producers fenced their partitions (a member that joined in
    between is seen then, one that joins later fences the run's producers: I3).
    ``fenced``: that second check, of the positions group only (members of the members
    group use the run's own transactional ids: they fence each other)."""
    refuse_beside_process_members(
        settings, what, "a run of its own beside them would publish rows twice"
    )
    if settings.fence_members or fenced:
        return
    refuse_beside(
        lambda: active_members(settings),
        settings.members_group,
        what,
        command="relay run",
        units="relay partitions",
        work="publish",
    )


def refuse_beside_process_members(settings: RelaySettings, what: str, harm: str) -> None:
    """Refused while `relay run` processes with one transaction per process (members of
    the positions group) run: nothing but their generation fences them. ``harm``: what
    ``what`` would do beside them."""
    sharing = _members_seen(settings, settings.group, what)
    if sharing:
        running = "1 member" if sharing == 1 else f"{sharing} members"
        verb = "publishes" if sharing == 1 else "publish"
        raise ConfigurationError(
            f"{what}: {running} of group {settings.group} (`relay run`, one transaction "
            f"per process) {verb} the relay partitions; {harm}, and cannot fence them: "
            "stop them first (a killed one counts until its session times out)"
        )


def refuse_mixed_sharing(settings: RelaySettings) -> None:
    """`relay run` processes share the relay partitions one of two ways: through the
    members group, each relay partition in transactions of its own, or as members of the
    positions group (one transaction per process, the default). Side by side the two kinds would
    publish rows twice: a member fences a relay partition's own transactional id only
    when it takes the partition, not a process of the other kind that starts on it later.
    So a process refuses to start beside processes of the other kind, and one of the
    first kind checks again after each fence of a partition's producer (``settings`` as
    :func:`for_database` returns them)."""
    other = settings.members_group if settings.process_transactions else settings.group
    running = _members_seen(settings, other, "relay run")
    if not running:
        return
    processes, s = ("1 process", "s") if running == 1 else (f"{running} processes", "")
    if settings.process_transactions:
        raise ConfigurationError(
            f"relay run: {processes} with one transaction per relay partition (members of "
            f"group {other}: --partition-transactions, or a version from before one "
            f"transaction per process was the default) share{s} the relay partitions; "
            "beside them this one would publish rows twice: stop them first, or run this "
            "one with --partition-transactions too (every process of an outbox takes the "
            "same RELAY_PROCESS_TRANSACTIONS)"
        )
    raise ConfigurationError(
        f"relay run --partition-transactions: {processes} with one transaction per process "
        f"(members of group {other}) publish{'es' if s else ''} the relay partitions; "
        "beside them this one would publish rows twice: run it without "
        "--partition-transactions (every process of an outbox takes the same "
        "RELAY_PROCESS_TRANSACTIONS), or stop them first"
    )


def select_partitions(requested: Sequence[int] | None, partitions: int) -> list[int]:
    if not requested:
        return list(range(partitions))
    unknown = sorted(p for p in requested if not 0 <= p < partitions)
    if unknown:
        raise ConfigurationError(
            f"relay partition {unknown[0]} does not exist (the outbox has {partitions}: "
            f"0..{partitions - 1})"
        )
    return sorted(set(requested))


def for_database(
    settings: RelaySettings, database: Database
) -> tuple[RelaySettings, PositionOwner]:
    """``settings`` with the prefix and positions group the database chose where unset, and
    the owner every position of these relays carries (read once per run)."""
    identity = PostgresOutboxSource(database).identity()
    settings = settings.with_database_defaults(identity.default_prefix)
    return settings, PositionOwner(identity.database_id, settings.prefix)


def build_partition_relay(
    settings: RelaySettings,
    owner: PositionOwner,
    partition: int,
    database: Database,
    *,
    retry: RetryPolicy | None = None,
    clock: Clock | None = None,
    observer: RelayObserver | None = None,
    transactions: MemberTransactions | None = None,
    after_fence: Callable[[], None] | None = None,
    drawing: bool = True,
) -> PartitionRelay:
    """``settings`` and ``owner`` as :func:`for_database` returns them; ``transactions``:
    the process's shared transaction (one per process); ``after_fence``: run
    after each fence (the check of a run of its own, :func:`refuse_beside_members`);
    ``drawing``: the partition draws the outbox's positions itself before each read (a
    `--once` run, a Spark task), else `relay run`'s commit watch draws them."""
    publisher: TransactionalPublisher = (
        KafkaTransactionalPublisher(settings, partition, owner)
        if transactions is None
        else MemberPartitionPublisher(settings, partition, owner, transactions)
    )
    if settings.cloudevents_topics:
        publisher = CloudEventsPublisher(publisher, cloudevents(settings, database))
    if tracing.available():
        publisher = TracedPublisher(publisher, partition)
    return PartitionRelay(
        partition,
        PostgresOutboxSource(database, settling=bool(settings.heartbeat_topics), drawing=drawing),
        publisher,
        owner=owner,
        batch_size=settings.batch_size,
        batch_bytes=settings.batch_bytes,
        transaction_timeout_s=settings.kafka.transaction_timeout_ms / 1000,
        cleanup=settings.cleanup,
        missing_topic_wait_s=settings.missing_topic_wait_s,
        retry=retry,
        clock=clock,
        failpoints=Failpoints.from_env(),
        observer=observer,
        heartbeat_topics=settings.heartbeat_topics,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        after_fence=after_fence,
    )


def cloudevents(settings: RelaySettings, database: Database) -> CloudEvents:
    """The CloudEvents topics and their ``ce_source``: ``--cloudevents-source``, else the
    database's URL without user, password or options (``postgresql://host:port/db``)."""
    source = settings.cloudevents_source
    if source is None:
        parts = urlsplit(database.url.reveal())
        host = parts.hostname or "localhost"
        where = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port else ""
        source = f"postgresql://{where}{port}{parts.path or '/'}"
    return CloudEvents(frozenset(settings.cloudevents_topics), source)
