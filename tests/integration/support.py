"""Helpers for integration tests against the real PostgreSQL server and Kafka broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from relay.postgres import migrations
from relay.runtime.secrets import Secret

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RelayTestEnv:
    database_url: str
    bootstrap_servers: str
    prefix: str

    @property
    def positions_topic(self) -> str:
        return f"{self.prefix}-positions"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_DATABASE_URL=self.database_url,
            RELAY_KAFKA_BOOTSTRAP_SERVERS=self.bootstrap_servers,
            RELAY_TRANSACTIONAL_ID_PREFIX=self.prefix,
            RELAY_POSITIONS_TOPIC=self.positions_topic,
            RELAY_POSITIONS_GROUP=f"{self.prefix}-positions",
            RELAY_POLL_INTERVAL_S="0.1",
        )
        env.update(extra)
        return env

    def sql(self, statement: str, **params: object) -> list[tuple[object, ...]]:
        return run_sql(self.database_url, statement, **params)


def run_sql(database_url: str, statement: str, **params: object) -> list[tuple[object, ...]]:
    """One statement in a transaction of its own; its rows, if it returns any."""
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


def new_prefix() -> str:
    return f"it-{uuid.uuid4().hex[:10]}"


def migrate(database_url: str, partitions: int) -> None:
    migrations.upgrade(Secret(database_url))
    run_sql(database_url, "UPDATE outbox_settings SET partitions = :n", n=partitions)


def relay_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "relay.cli", *args]


def run_relay(
    env: RelayTestEnv, *args: str, timeout: float = 180, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        relay_command(*args),
        env=env.env(**extra_env),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_job(
    script: str, env: Mapping[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``jobs/<script>`` (a Spark job) to completion with ``env``."""
    return subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "jobs" / script), *args],
        env=dict(env),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_relay(
    env: RelayTestEnv, *args: str, log: Path | None = None, **extra_env: str
) -> subprocess.Popen[str]:
    """`relay <args>` in the background. Without ``log`` its stdout and stderr are pipes,
    for a process read with ``communicate()``; a long-running one writes both to ``log``
    instead (a pipe nobody reads would fill up and block it)."""
    if log is None:
        return subprocess.Popen(
            relay_command(*args),
            env=env.env(**extra_env),
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    with log.open("w") as handle:
        return subprocess.Popen(
            relay_command(*args),
            env=env.env(**extra_env),
            cwd=PROJECT_ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )


def wait_until(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    explain: Callable[[], str] | None = None,
) -> None:
    """Poll ``condition`` until it holds; fail with ``what`` (and what ``explain`` returns
    then, e.g. a process's log) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            details = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{details}")
        time.sleep(0.05)


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes]
    timestamp: tuple[int, int] = (0, 0)  # (confluent_kafka.TIMESTAMP_*, milliseconds)

    @property
    def outbox_id(self) -> int:
        return int(self.headers["outbox-id"])

    @property
    def seq(self) -> int:
        return int(self.headers["outbox-seq"])

    @property
    def relay_partition(self) -> int:
        return int(self.headers["outbox-partition"])


def read_committed(bootstrap: str, topic: str, timeout: float = 60) -> list[Consumed]:
    """Every record of ``topic`` a read_committed consumer sees, from the beginning to
    the last stable offset of each partition, in partition then offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending = set(partitions)
        records: list[Consumed] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic}: partitions {pending} never reached EOF")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                    continue
                raise AssertionError(f"reading {topic}: {msg.error()}")
            records.append(
                Consumed(
                    msg.partition(),
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    {k: v for k, v in (msg.headers() or [])},
                    msg.timestamp(),
                )
            )
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def assert_exactly_once_in_order(consumed: Iterable[Consumed], expected_ids: set[int]) -> None:
    """Every expected outbox id exactly once, nothing else, and within each Kafka
    partition the records of each relay partition in ascending seq order."""
    records = list(consumed)
    ids = [r.outbox_id for r in records]
    duplicates = len(ids) - len(set(ids))
    assert duplicates == 0, f"{duplicates} duplicated records"
    missing = expected_ids - set(ids)
    assert not missing, f"{len(missing)} committed rows never published, e.g. {sorted(missing)[:5]}"
    unexpected = set(ids) - expected_ids
    assert not unexpected, f"{len(unexpected)} records that were never committed"
    last: dict[tuple[int, int], int] = {}
    for r in records:
        slot = (r.partition, r.relay_partition)
        assert r.seq > last.get(slot, 0), f"out of seq order in {slot}: {r.seq} after {last[slot]}"
        last[slot] = r.seq
