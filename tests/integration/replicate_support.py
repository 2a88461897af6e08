"""Two clusters for `relay replicate` tests: writing a source topic with transactions (some
aborted), running the replicator, and reading both sides back read_committed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from relay.devenv.reader import read_committed
from relay.devenv.topics import create_topic
from relay.replication.types import PROVENANCE_HEADERS, SOURCE_OFFSET_HEADER
from tests.integration.support import wait_until

PROJECT_ROOT = Path(__file__).resolve().parents[2]

Copy = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]
"""What must survive a copy: key, value, the record's own headers, timestamp."""


@dataclass(frozen=True)
class Replicated:
    """One committed record as a read_committed consumer sees it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int

    def own(self) -> Copy:
        own = tuple(h for h in self.headers if h[0] not in PROVENANCE_HEADERS)
        return (self.key, self.value, own, self.timestamp)

    def source_offset(self) -> int:
        found = dict(self.headers).get(SOURCE_OFFSET_HEADER)
        if found is None:
            raise AssertionError(f"no {SOURCE_OFFSET_HEADER} header at offset {self.offset}")
        return int(found)


@dataclass(frozen=True)
class ReplicaEnv:
    source: str
    target: str
    group: str

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS=self.source,
            RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS=self.target,
            RELAY_REPLICATE_SOURCE_ALIAS="east",
        )
        if self.group:  # else the default group
            env.update(RELAY_REPLICATE_GROUP=self.group)
        env.update(extra)
        return env

    def run(
        self, *args: str, timeout: float = 180, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "relay.cli", "replicate", *args],
            env=self.env(**extra),
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, *args: str, log: Path, **extra: str) -> subprocess.Popen[str]:
        with log.open("w") as handle:
            return subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "replicate", *args],
                env=self.env(**extra),
                cwd=PROJECT_ROOT,
                stdout=handle,
                stderr=subprocess.STDOUT,
                text=True,
            )


def new_group() -> str:
    return f"it-replicate-{uuid.uuid4().hex[:10]}"


def write_transactions(
    bootstrap: str,
    topic: str,
    transactions: int,
    per_transaction: int,
    *,
    abort_every: int = 4,
    first: int = 0,
    partition: int | None = None,
) -> int:
    """Write ``transactions`` transactions of records ``v<n>`` (n from ``first``), keys
    spread over the partitions, one header each; every ``abort_every``-th transaction is
    aborted. Returns the next n."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"it-fill-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    # Recent timestamps: the brokers' retention (7 days) would delete older records.
    stamped_from = int(time.time() * 1000) - 60_000
    n = first
    for t in range(transactions):
        producer.begin_transaction()
        for _ in range(per_transaction):
            extra = {} if partition is None else {"partition": partition}
            producer.produce(
                topic,
                value=b"v%d" % n,
                key=b"k%d" % (n % 23),
                headers=[("trace", b"t%d" % n)],
                timestamp=stamped_from + n,
                **extra,
            )
            n += 1
        if abort_every and t % abort_every == abort_every - 1:
            producer.flush(30)  # the aborted records are in the log, not just dropped
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    return n


def read_log(bootstrap: str, topic: str, partitions: int) -> dict[int, list[Replicated]]:
    """Every committed record of each partition, from its first offset to its last
    stable offset."""
    found: dict[int, list[Replicated]] = {p: [] for p in range(partitions)}
    for r in read_committed(bootstrap, topic):
        found[r.partition].append(
            Replicated(r.partition, r.offset, r.key, r.value, r.header_pairs, r.timestamp[1])
        )
    return found


def assert_replica(
    source: dict[int, list[Replicated]], target: dict[int, list[Replicated]]
) -> None:
    """The target holds exactly the source's committed records, partition by partition,
    in order, each with its source offset in the provenance headers."""
    for p, records in source.items():
        copies = target.get(p, [])
        assert [c.own() for c in copies] == [r.own() for r in records], f"partition {p}"
        assert [c.source_offset() for c in copies] == [r.offset for r in records]


def committed_values(log: dict[int, list[Replicated]]) -> Sequence[bytes | None]:
    return [r.value for records in log.values() for r in records]


# Consumer groups on either cluster: committing, reading back, failing over.


def write_with_aborts(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    transactions: int,
    per_partition: int,
    *,
    abort_every: int = 3,
    first: int = 0,
) -> int:
    """Transactions of ``per_partition`` records ``v<n>`` in each of ``partitions``; every
    ``abort_every``-th is aborted (0: none). Each is flushed before it ends, so that an
    aborted one leaves its records in the log, behind its marker. Returns the next n."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"it-fo-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    n = first
    for t in range(transactions):
        producer.begin_transaction()
        for p in partitions:
            for _ in range(per_partition):
                producer.produce(topic, b"v%d" % n, b"k%d" % n, partition=p)
                n += 1
        producer.flush(30)
        if abort_every and t % abort_every == abort_every - 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    return n


def group_consumer(
    bootstrap: str, group: str, extra: dict[str, str | bool] | None = None
) -> Consumer:
    """A consumer of ``group``, read_committed, committing only when told."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            **(extra or {}),
        }
    )


def consume_and_commit(
    bootstrap: str, group: str, topic: str, consumed: dict[int, int], commit: dict[int, int]
) -> None:
    """A consumer of ``group`` reads ``consumed[p]`` records of each partition, then
    commits ``commit[p]`` (the next offset it would read, maybe past markers)."""
    consumer = group_consumer(bootstrap, group)
    try:
        for p, count in consumed.items():
            consumer.assign([TopicPartition(topic, p, 0)])
            for _ in range(count):
                message = consumer.poll(30)
                assert message is not None and message.error() is None, f"{topic}[{p}]"
        offsets = [TopicPartition(topic, p, offset) for p, offset in commit.items()]
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """``group``'s committed offsets of ``topic`` (partitions without one left out)."""
    consumer = group_consumer(bootstrap, group)
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        found = consumer.committed(wanted, timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def last_stable_offset(bootstrap: str, topic: str, partition: int) -> int:
    consumer = group_consumer(bootstrap, f"it-lso-{uuid.uuid4().hex}")
    try:
        tp = TopicPartition(topic, partition)
        return int(consumer.get_watermark_offsets(tp, timeout=30, cached=False)[1])
    finally:
        consumer.close()


def resume_on_target(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, list[Replicated]]:
    """What a consumer of ``group`` that subscribes to ``topic`` on the target reads, from
    the group's committed offsets to the end of each partition."""
    consumer = group_consumer(
        bootstrap, group, {"enable.partition.eof": True, "auto.offset.reset": "earliest"}
    )
    found: dict[int, list[Replicated]] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    deadline = time.monotonic() + 90
    consumer.subscribe([topic])
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"ended: {ended}, read: {found}"
            message = consumer.poll(1)
            if message is None:
                continue
            err = message.error()
            if err is not None:
                assert err.code() == err._PARTITION_EOF, str(err)
                ended.add(message.partition() or 0)
                continue
            found[message.partition() or 0].append(
                Replicated(
                    message.partition() or 0,
                    message.offset() or 0,
                    message.key(),
                    message.value(),
                    tuple(message.headers() or ()),  # type: ignore[arg-type]
                    message.timestamp()[1],
                )
            )
    finally:
        consumer.close()
    return found


def recreate_topic(admin: AdminClient, topic: str, partitions: int = 1) -> None:
    """Delete ``topic`` and create it again (a new topic id, offsets from 0)."""
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 60, f"{topic} deleted")

    def created() -> bool:
        try:
            create_topic(admin, topic, partitions)
        except Exception:  # still being deleted: try again
            return False
        return True

    wait_until(created, 60, f"{topic} created again")
