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

from confluent_kafka import Producer

from relay.devenv.reader import read_committed
from relay.replication.types import PROVENANCE_HEADERS, SOURCE_OFFSET_HEADER

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
