"""The checker's inputs: the topic as a read_committed consumer sees it, its replica on
the target cluster read the same way, and the workload's own tables. Nothing here reads
the relay's, the mirror's or the replicator's bookkeeping, nor uses their adapters."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec
from sqlalchemy import Engine, text

from relay.chaos.checker import (
    AccountRow,
    CheckResult,
    HistoryRow,
    LedgerEntry,
    compare_events,
    compare_history,
    compare_mirror,
)
from relay.chaos.names import ACCOUNTS, LEDGER
from relay.chaos.replica_checker import combine, compare_generations, compare_replica
from relay.chaos.topic_records import Headers, TopicRecord
from relay.errors import CheckerError, KafkaError
from relay.postgres.engine import make_engine
from relay.runtime.clock import Deadline
from relay.settings.relay import RelaySettings


@dataclass(frozen=True, slots=True)
class KafkaAccess:
    bootstrap_servers: str
    properties: Mapping[str, str]

    def config(self, **extra: str | int | float | bool) -> dict[str, str | int | float | bool]:
        return {**self.properties, "bootstrap.servers": self.bootstrap_servers, **extra}


@dataclass(frozen=True, slots=True)
class ReplicaAccess:
    """Where the replica of the checked topic is: ``topic`` on the cluster ``kafka``;
    ``source_cluster``: the alias its copies must name (None: any)."""

    kafka: KafkaAccess
    topic: str
    source_cluster: str | None = None
    # A second replicated topic, deleted and created again during the run: its source
    # topic, its copy, and the records of each earlier life (the topic now is the last).
    ingest: tuple[str, str, Sequence[Sequence[TopicRecord]]] | None = None


def _end_offsets(
    admin: AdminClient, topic: str, partitions: list[int], level: IsolationLevel
) -> dict[int, int]:
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}  # type: ignore[no-untyped-call]
    futures = admin.list_offsets(request, isolation_level=level, request_timeout=15)
    return {tp.partition: int(future.result().offset) for tp, future in futures.items()}


def wait_until_stable(
    kafka: KafkaAccess, topic: str, partitions: list[int], deadline: Deadline
) -> None:
    """Wait until no transaction is open on ``topic``: the last stable offset of each
    partition equals its high watermark (a killed producer's transaction ends when a
    new instance fences it or when ``transaction.timeout.ms`` passes)."""
    admin = AdminClient(kafka.config())
    while True:
        stable = _end_offsets(admin, topic, partitions, IsolationLevel.READ_COMMITTED)
        end = _end_offsets(admin, topic, partitions, IsolationLevel.READ_UNCOMMITTED)
        open_partitions = sorted(p for p in partitions if stable[p] < end[p])
        if not open_partitions:
            return
        if deadline.expired():
            raise CheckerError(
                f"{topic} partitions {open_partitions} still have an open transaction"
            )
        time.sleep(0.5)


def read_topic(kafka: KafkaAccess, topic: str, timeout: float = 120.0) -> list[TopicRecord]:
    """Every record of ``topic`` a read_committed consumer sees, from the beginning to
    the end, after waiting for open transactions to end (so that a late commit is not
    reported as lost). Nothing may write to the topic meanwhile."""
    deadline = Deadline(timeout)
    consumer = Consumer(
        {
            **kafka.config(),
            "group.id": f"chaos-checker-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise CheckerError(f"topic {topic} not found on {kafka.bootstrap_servers}")
        partitions = sorted(found.partitions)
        wait_until_stable(kafka, topic, partitions, deadline)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: list[TopicRecord] = []
        _poll_until_eof(consumer, set(partitions), records, deadline)
        return records
    except KafkaException as exc:
        raise KafkaError(f"reading {topic}: {exc}") from None
    finally:
        consumer.close()


def _poll_until_eof(
    consumer: Consumer, pending: set[int], records: list[TopicRecord], deadline: Deadline
) -> None:
    waiting = set(pending)
    while waiting:
        if deadline.expired():
            raise CheckerError(f"partitions {sorted(waiting)} never reached their end")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        error = msg.error()
        if error is not None:
            if error.code() == LibKafkaError._PARTITION_EOF:
                waiting.discard(msg.partition())
                continue
            raise CheckerError(f"reading partition {msg.partition()}: {error.str()}")
        partition, offset = msg.partition(), msg.offset()
        if partition is None or offset is None:
            continue
        kind, timestamp = msg.timestamp()
        records.append(
            TopicRecord(
                partition,
                offset,
                msg.key(),
                msg.value(),
                _headers(msg.headers()),
                None if kind == TIMESTAMP_NOT_AVAILABLE else timestamp,
            )
        )


def _headers(raw: object) -> Headers:
    """A consumed record's headers: librdkafka gives a list of (name, bytes) or None."""
    if not isinstance(raw, list):
        return ()
    return tuple(
        (str(name), value.encode() if isinstance(value, str) else value) for name, value in raw
    )


def read_ledger(engine: Engine) -> list[LedgerEntry]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT event_id, key, version, balance FROM {LEDGER}"))
        return [LedgerEntry(str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]


def read_accounts(engine: Engine, table: str) -> dict[str, AccountRow]:
    """``key -> row`` of an accounts-shaped table (``key``, ``version``, ``balance``)."""
    with engine.connect() as conn:
        rows = conn.execute(text(f'SELECT key, version, balance FROM "{table}"'))
        return {str(r[0]): AccountRow(str(r[0]), int(r[1]), int(r[2])) for r in rows}


def read_history(engine: Engine, table: str) -> list[HistoryRow]:
    """Every row of a history-shaped (scd2) table."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT key, seq, version, balance, valid_from, valid_to, is_current "
                f'FROM "{table}"'
            )
        )
        return [HistoryRow(str(r[0]), int(r[1]), int(r[2]), int(r[3]), *r[4:]) for r in rows]


def run_check(
    engine: Engine,
    kafka: KafkaAccess,
    topic: str,
    mirror_table: str | None = None,
    timeout: float = 120.0,
    *,
    replica: ReplicaAccess | None = None,
    history_table: str | None = None,
) -> CheckResult:
    """Read the evidence and compare it (writers, relays and replicators must have
    stopped)."""
    records = read_topic(kafka, topic, timeout)
    result = compare_events(read_ledger(engine), records)
    if mirror_table is not None:
        mirror = read_accounts(engine, mirror_table)
        mismatch, examples = compare_mirror(read_accounts(engine, ACCOUNTS), mirror)
        result = result.with_mirror(mismatch, len(mirror), examples)
    if history_table is not None:
        versions = read_history(engine, history_table)
        mismatch, examples = compare_history(read_ledger(engine), versions)
        result = result.with_history(mismatch, len(versions), examples)
    if replica is not None:
        copies = read_topic(replica.kafka, replica.topic, timeout)
        checked = compare_replica(records, copies, topic, replica.source_cluster)
        if replica.ingest is not None:
            source, target, earlier = replica.ingest
            lives = [*earlier, read_topic(kafka, source, timeout)]
            copied = read_topic(replica.kafka, target, timeout)
            checked = combine(
                checked, compare_generations(lives, copied, source, replica.source_cluster)
            )
        result = result.with_replica(checked)
    return result


def check(
    settings: RelaySettings,
    topic: str,
    mirror_table: str | None,
    timeout: float = 120.0,
    *,
    replica: ReplicaAccess | None = None,
    history_table: str | None = None,
) -> CheckResult:
    """`relay chaos check`: :func:`run_check` against the servers ``settings`` name."""
    kafka = KafkaAccess(
        settings.kafka.bootstrap_servers,
        {k: v.reveal() for k, v in settings.kafka.properties.items()},
    )
    engine = make_engine(settings.database_url, pool_size=1)
    try:
        return run_check(
            engine,
            kafka,
            topic,
            mirror_table,
            timeout,
            replica=replica,
            history_table=history_table,
        )
    finally:
        engine.dispose()
