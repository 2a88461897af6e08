"""Setting up a chaos run: its database, topic and mapping, and the processes under test
(with the replicator of the topic to the second cluster, when the run replicates)."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from sqlalchemy import Engine, text

from relay.chaos.config import ChaosConfig
from relay.chaos.names import HISTORY, INGEST_TOPIC, MIRROR, TOPIC
from relay.chaos.processes import Command, Slot, Supervisor
from relay.chaos.workload import create_schema
from relay.devenv.cli_runner import relay_command
from relay.devenv.private import PrivateServers
from relay.errors import RelayError
from relay.postgres import migrations
from relay.postgres.migrations import PROJECT_ROOT
from relay.publishing.partition_relay import READY as RELAY_READY
from relay.runtime.secrets import Secret

SPARK_JOB = PROJECT_ROOT / "jobs" / "outbox_relay.py"
MIRROR_JOB = PROJECT_ROOT / "jobs" / "mirror.py"
MIRROR_SLOTS = ("mirror-1", "mirror-2")
# What a Spark job's log shows once its tasks work: a relay task holds its partition
# (earlier producers fenced), a mirror task was assigned its Kafka partition.
TASK_STARTED = {"spark": RELAY_READY, "spark-mirror": "assigned "}
MIRROR_GROUP = "chaos-mirror"
# The group notices a paused (SIGSTOP) mirror consumer after 6 s, the broker's minimum.
MIRROR_KAFKA_PROPERTIES = "session.timeout.ms=6000;heartbeat.interval.ms=1000"
# Relay settings of the processes under test: small batches (many transactions, many
# crash points) and a short transaction timeout, so that the open transaction of a
# killed relay does not hold read_committed consumers for long.
RELAY_SETTINGS = {
    "RELAY_BATCH_SIZE": "100",
    "RELAY_POLL_INTERVAL_S": "0.1",
    "RELAY_TRANSACTION_TIMEOUT_MS": "10000",
    "RELAY_KAFKA_TIMEOUT_S": "5",
}
REPLICATOR = "replicator"
REPLICA_PREFIX = "dr."  # target topic = dr.<topic>, on the second cluster
REPLICA_ALIAS = "chaos-source"  # the relay-source-cluster header of every copy
# The replicator's settings, for the same reasons as the relay's: small batches (many
# transactions, many crash points), a transaction timeout below the pause that outlasts
# it (FaultContext.replicator_pause_s).
REPLICATE_SETTINGS = {
    "RELAY_REPLICATE_BATCH_SIZE": "100",
    "RELAY_REPLICATE_TRANSACTION_TIMEOUT_MS": "6000",
    "RELAY_REPLICATE_KAFKA_TIMEOUT_S": "5",
}


@dataclass(frozen=True, slots=True)
class Environment:
    servers: PrivateServers
    workdir: Path
    topic: str
    prefix: str
    ingests: bool = False  # the ingest topic is written and replicated too
    partition_transactions: bool = False  # `relay run --partition-transactions`

    @classmethod
    def create(
        cls, servers: PrivateServers, workdir: Path, config: ChaosConfig, rng: random.Random
    ) -> Environment:
        (workdir / "traps").mkdir(exist_ok=True)
        prefix = f"chaos-{config.seed}-{rng.randrange(16**6):06x}"
        ingests = config.ingests and servers.target_bootstrap_servers is not None
        return cls(servers, workdir, TOPIC, prefix, ingests, config.partition_transactions)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_DATABASE_URL=self.servers.database_url,
            RELAY_KAFKA_BOOTSTRAP_SERVERS=self.servers.bootstrap_servers,
            RELAY_TRANSACTIONAL_ID_PREFIX=self.prefix,
            RELAY_POSITIONS_TOPIC=f"{self.prefix}-positions",
            RELAY_POSITIONS_GROUP=f"{self.prefix}-positions",
            **RELAY_SETTINGS,
            RELAY_PROCESS_TRANSACTIONS=str(not self.partition_transactions).lower(),
        )
        env.update(RELAY_MIRROR_CONFIG=str(self.mapping), RELAY_MIRROR_GROUP=MIRROR_GROUP)
        env.update(extra)
        return env

    @property
    def replica_topic(self) -> str | None:
        """The topic's copy on the second cluster; None: the run does not replicate."""
        if self.servers.target_bootstrap_servers is None:
            return None
        return REPLICA_PREFIX + self.topic

    @property
    def ingest_topic(self) -> str | None:
        """The topic written straight to Kafka and replicated, for the fault that creates
        it again (relay.chaos.ingest); None: not in this run."""
        return INGEST_TOPIC if self.ingests else None

    @property
    def replica_group(self) -> str:
        return f"{self.prefix}-replicate"

    def replicate_env(self, **extra: str) -> dict[str, str]:
        """The environment of ``relay replicate``: the topic from the chaos broker to the
        second cluster's."""
        target = self.servers.target_bootstrap_servers
        if target is None:
            raise RelayError("this chaos run has no second cluster to replicate to")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS=self.servers.bootstrap_servers,
            RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS=target,
            RELAY_REPLICATE_TOPICS=",".join(filter(None, (self.topic, self.ingest_topic))),
            RELAY_REPLICATE_TARGET_PREFIX=REPLICA_PREFIX,
            RELAY_REPLICATE_SOURCE_ALIAS=REPLICA_ALIAS,
            RELAY_REPLICATE_GROUP=self.replica_group,
            **REPLICATE_SETTINGS,
        )
        env.update(extra)
        return env

    @property
    def mapping(self) -> Path:
        return self.workdir / "mirror.toml"

    def trap(self, name: str, incarnation: int) -> Path:
        path = self.workdir / "traps" / f"{name}.{incarnation:04d}"
        path.touch()  # exists: the failpoint does not fire until the file is deleted
        return path


def write_mapping(path: Path, topic: str) -> None:
    path.write_text(
        "# Written by relay chaos: the workload's events mirrored into the mirror tables.\n"
        "[[tables]]\n"
        f'table = "{MIRROR}"\n'
        f'topics = ["{topic}"]\n'
        'key = { column = "key" }\n'
        'version = { column = "version", source = "field:version" }\n'
        "[tables.columns]\n"
        'balance = "balance"\n'
        "\n# Every version of every account, valid from its event time (history scd2).\n"
        "[[tables]]\n"
        f'table = "{HISTORY}"\n'
        f'topics = ["{topic}"]\n'
        'history = "scd2"\n'
        'key = { column = "key" }\n'
        'version = { column = "seq", source = "header:outbox-seq" }\n'
        "[tables.columns]\n"
        'version = "version"\n'
        'balance = "balance"\n',
        encoding="utf-8",
    )


def prepare(env: Environment, engine: Engine, config: ChaosConfig) -> None:
    """Migrate, create the workload's tables, the topic and the mirror mapping."""
    # The development servers acknowledge commits before the WAL is flushed; by default
    # this database does not (what production runs), so a crash loses no commit that
    # the relay may already have published.
    setting = "on" if config.synchronous_commit else "off"
    with engine.begin() as conn:
        conn.execute(text(f"ALTER DATABASE relay SET synchronous_commit = {setting}"))
    migrations.upgrade(Secret(env.servers.database_url))
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE outbox_settings SET partitions = :n"), {"n": config.relay_partitions}
        )
    create_schema(engine, config.workload.keys)
    admin = AdminClient({"bootstrap.servers": env.servers.bootstrap_servers})
    topics = [t for t in (env.topic, env.ingest_topic) if t is not None]
    futures = admin.create_topics(
        [NewTopic(t, config.topic_partitions, 1) for t in topics], operation_timeout=30
    )
    for topic in topics:
        try:
            futures[topic].result(timeout=60)
        except KafkaException as exc:
            raise RelayError(f"cannot create topic {topic}: {exc}") from None
    write_mapping(env.mapping, env.topic)


def add_slots(
    supervisor: Supervisor,
    env: Environment,
    config: ChaosConfig,
    rng: random.Random,
) -> None:
    def relay(incarnation: int) -> Command:
        trap = env.trap("relay", incarnation)
        failpoint = f"before_commit=stop,once={trap}"
        return Command(
            relay_command("run"), env.env(RELAY_FAILPOINTS=failpoint), PROJECT_ROOT, trap
        )

    supervisor.add(Slot("relay", relay, lambda: 0.5))
    for name in MIRROR_SLOTS:
        supervisor.add(Slot(name, _mirror_command(env, name), lambda: 0.5))
    # The Spark relay job fences `relay run --partition-transactions` members; beside the
    # default ones (one transaction per process) it is refused, so it runs only with them.
    jobs = [("spark", SPARK_JOB)] if config.partition_transactions else []
    for name, job in (*jobs, ("spark-mirror", MIRROR_JOB)):
        slot = Slot(name, _job_command(env, job), lambda: rng.uniform(*config.spark_every_s))
        slot.next_start = supervisor.clock.monotonic() + rng.uniform(*config.spark_every_s)
        supervisor.add(slot)
    if env.replica_topic is not None:

        def replicator(incarnation: int) -> Command:
            trap = env.trap(REPLICATOR, incarnation)
            failpoint = f"before_commit=stop,once={trap}"
            replicate_env = env.replicate_env(RELAY_FAILPOINTS=failpoint)
            return Command(relay_command("replicate"), replicate_env, PROJECT_ROOT, trap)

        supervisor.add(Slot(REPLICATOR, replicator, lambda: 0.5))


def _job_command(env: Environment, job: Path) -> Callable[[int], Command]:
    def command(_incarnation: int) -> Command:
        # local[2,3]: two task slots, a failed task (a killed Python worker) runs again.
        # The relay job runs beside the `relay run` members on purpose: it fences them.
        return Command(
            [sys.executable, str(job), "--master", "local[2,3]"],
            env.env(RELAY_FENCE_MEMBERS="true"),
            PROJECT_ROOT,
        )

    return command


def _mirror_command(env: Environment, name: str) -> Callable[[int], Command]:
    def command(incarnation: int) -> Command:
        trap = env.trap(name, incarnation)
        extra = {
            "RELAY_FAILPOINTS": f"mirror_after_apply=stop,once={trap}",
            "RELAY_KAFKA_PROPERTIES": MIRROR_KAFKA_PROPERTIES,
        }
        return Command(relay_command("mirror"), env.env(**extra), PROJECT_ROOT, trap)

    return command
