"""Helpers for the mirror's integration tests: a mirrored test table with an audit
trigger, a transactional producer, and running `relay mirror` as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from tests.integration.support import PROJECT_ROOT, migrate, relay_command, run_sql

# Every upsert the mirror attempts fires the BEFORE INSERT trigger, also when ON CONFLICT
# turns it into an update or a no-op; a rolled-back attempt leaves no audit row. So the
# audit holds exactly one row per applied record: a duplicate means a record applied twice,
# a missing one a record skipped.
ITEMS_DDL = """
CREATE TABLE items (
    id integer PRIMARY KEY,
    name text NOT NULL,
    qty integer NOT NULL CHECK (qty >= 0),
    version bigint NOT NULL
);
CREATE TABLE items_audit (id integer NOT NULL, version bigint NOT NULL);
CREATE FUNCTION items_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO items_audit VALUES (NEW.id, NEW.version);
  RETURN NEW;
END $$;
CREATE TRIGGER items_audit BEFORE INSERT ON items
FOR EACH ROW EXECUTE FUNCTION items_audit();
"""


def items_mapping(topics: Sequence[str], version_source: str = "offset") -> str:
    return f"""
[[tables]]
table = "items"
topics = {json.dumps(list(topics))}
key = {{ column = "id" }}
version = {{ column = "version", source = "{version_source}" }}

[tables.columns]
name = "name"
qty = "qty"
"""


@dataclass(frozen=True)
class MirrorEnv:
    database_url: str
    bootstrap_servers: str
    mapping: Path
    group: str

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_DATABASE_URL=self.database_url,
            RELAY_KAFKA_BOOTSTRAP_SERVERS=self.bootstrap_servers,
            RELAY_MIRROR_CONFIG=str(self.mapping),
            RELAY_MIRROR_MAX_WAIT_S="0.2",
        )
        if self.group:  # else the default group
            env.update(RELAY_MIRROR_GROUP=self.group)
        env.update(extra)
        return env

    def run(
        self, *args: str, timeout: float = 120, log_level: str = "INFO", **extra: str
    ) -> subprocess.CompletedProcess[str]:
        return self.relay("--log-level", log_level, "mirror", *args, timeout=timeout, **extra)

    def dead_letters(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`relay dead-letters ARGS --mirror` for this group and mapping."""
        return self.relay("dead-letters", *args, "--mirror")

    def relay(
        self, *args: str, timeout: float = 120, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            relay_command(*args),
            env=self.env(**extra),
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, log: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
        """A long-running `relay mirror`; its output goes to ``log`` (a pipe nobody
        reads would fill up and block it)."""
        handle = log.open("w")
        try:
            return subprocess.Popen(
                relay_command("mirror", *args),
                env=self.env(**extra),
                cwd=PROJECT_ROOT,
                stdout=handle,
                stderr=subprocess.STDOUT,
                text=True,
            )
        finally:
            handle.close()

    def sql(self, statement: str, **params: object) -> list[tuple[object, ...]]:
        return run_sql(self.database_url, statement, **params)

    def offsets(self) -> dict[tuple[str, int], int]:
        rows = self.sql(
            "SELECT topic, partition, next_offset FROM mirror_offsets WHERE consumer_group = :g",
            g=self.group,
        )
        return {(str(t), int(str(p))): int(str(o)) for t, p, o in rows}


def run_script(database_url: str, script: str) -> None:
    """Several SQL statements (DDL) in one transaction."""
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(script)
    finally:
        engine.dispose()


def mirror_env(
    database_url: str, bootstrap: str, tmp_path: Path, mapping_text: str, ddl: str = ITEMS_DDL
) -> MirrorEnv:
    """The test database migrated, with ``ddl`` applied, and a mapping file."""
    migrate(database_url, 4)
    run_script(database_url, ddl)
    path = tmp_path / "mirror.toml"
    path.write_text(mapping_text)
    return MirrorEnv(database_url, bootstrap, path, f"mirror-{uuid.uuid4().hex[:10]}")


Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


def item(item_id: int, name: str, qty: int, **headers: str) -> Record:
    value = json.dumps({"name": name, "qty": qty}).encode()
    return (
        str(item_id).encode(),
        value,
        [(k.replace("_", "-"), v.encode()) for k, v in headers.items()],
    )


def tombstone(item_id: int) -> Record:
    return (str(item_id).encode(), None, [])


class TxProducer:
    """A transactional producer for tests (murmur2_random, as the relay)."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"test-{uuid.uuid4().hex}",
                "partitioner": "murmur2_random",
                "linger.ms": 5,
            }
        )
        self.producer.init_transactions(30)

    def send(
        self,
        topic: str,
        records: Iterable[Record],
        partition: int | None = None,
        timestamp_ms: int = 0,  # 0: the producer's clock
    ) -> None:
        for key, value, headers in records:
            while True:
                try:
                    if partition is None:
                        self.producer.produce(
                            topic, value, key, headers=list(headers), timestamp=timestamp_ms
                        )
                    else:
                        self.producer.produce(
                            topic,
                            value,
                            key,
                            partition=partition,
                            headers=list(headers),
                            timestamp=timestamp_ms,
                        )
                    break
                except BufferError:
                    self.producer.poll(0.05)

    def transaction(
        self,
        topic: str,
        records: Iterable[Record],
        partition: int | None = None,
        commit: bool = True,
        timestamp_ms: int = 0,
    ) -> None:
        self.producer.begin_transaction()
        self.send(topic, records, partition, timestamp_ms)
        if commit:
            self.producer.commit_transaction(30)
        else:
            self.producer.abort_transaction(30)

    def in_transactions(self, topic: str, records: Sequence[Record], size: int = 100) -> None:
        for start in range(0, len(records), size):
            self.transaction(topic, records[start : start + size])


def last_stable_offsets(bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lso-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        result = {}
        for p in partitions:
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=10, cached=False
            )
            result[(topic, p)] = int(high)
        return result
    finally:
        consumer.close()


def items_state(env: MirrorEnv) -> dict[int, tuple[str, int]]:
    """The mirrored items: id -> (name, qty)."""
    return {
        int(str(i)): (str(n), int(str(q))) for i, n, q in env.sql("SELECT id, name, qty FROM items")
    }


def audit_duplicates(env: MirrorEnv) -> list[tuple[object, ...]]:
    return env.sql(
        "SELECT id, version, count(*) FROM items_audit GROUP BY id, version HAVING count(*) > 1"
    )


def audit_count(env: MirrorEnv) -> int:
    return int(str(env.sql("SELECT count(*) FROM items_audit")[0][0]))


def records_of(history: Iterable[tuple[int, Mapping[str, object]]]) -> list[Record]:
    """The Kafka records of ``(id, {name, qty})`` pairs, in order."""
    return [item(i, str(v["name"]), int(str(v["qty"]))) for i, v in history]


def expected_items(
    records: Sequence[tuple[int, Mapping[str, object] | None]],
) -> dict[int, tuple[str, int]]:
    """The final state of ``(id, {name, qty} or None)`` records applied in order."""
    state: dict[int, tuple[str, int]] = {}
    for item_id, value in records:
        if value is None:
            state.pop(item_id, None)
        else:
            state[item_id] = (str(value["name"]), int(str(value["qty"])))
    return state
