"""Kafka -> Kafka replication, measured the same way for every replicator (MirrorMaker 2
and `relay replicate`, bench/relay_replicate.py).

Two private brokers (``two_brokers``) stand for the source and the target cluster. A
source topic of KAFKA_PARTITIONS partitions is filled first by a transactional producer,
TXN_RECORDS records per transaction, every ABORT_EVERY-th transaction aborted; each value
carries its sequence number. The replicator is then started on it, and a read_committed
consumer on the target, assigned to the replicated topic from offset 0, counts what
arrives: records/s from the first record to the one that completes the committed set,
and what arrived that should not have (duplicates, records of aborted transactions) or
never did (lost). A kill schedule (fractions of the committed records seen on the target)
SIGKILLs the replicator at each point and starts it again: the same schedule for every
replicator, so the duplicates each leaves are comparable.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from confluent_kafka import Consumer, Producer, TopicPartition

from relay import devenv
from relay.devenv.private import start_broker

from .common import create_topic, distinct_keys, log, run_id

TXN_RECORDS = 500
ABORT_EVERY = 10
"""Transaction i (0-based) of the source is aborted when i % ABORT_EVERY == ABORT_EVERY - 1."""
SETTLE_S = 3.0
"""How long the target is still read once every committed record arrived (late copies)."""


@dataclass(frozen=True, slots=True)
class Flow:
    """What a replicator is given: the two clusters, the topics, a directory of its own."""

    source: str
    target: str
    topics: tuple[str, ...]
    workdir: Path


class Replicator(Protocol):
    """One replicator under test. ``start`` returns once it replicates (and may be called
    again after ``kill``); ``kill`` is a crash (SIGKILL); ``stop`` is a clean stop."""

    def target_topic(self, topic: str) -> str: ...

    def start(self) -> None: ...

    def kill(self) -> None: ...

    def stop(self) -> None: ...


ReplicatorFactory = Callable[[Flow], Replicator]


@contextmanager
def two_brokers(workdir: Path) -> Iterator[tuple[str, str]]:
    """(source, target) bootstrap servers of two private single-node brokers under
    ``workdir``, killed and removed afterwards."""
    dirs = [workdir / "source-broker", workdir / "target-broker"]
    try:
        yield start_broker(dirs[0]), start_broker(dirs[1])
    finally:
        for wd in dirs:
            try:
                devenv.stop_kafka(wd, True)
            except devenv.DevEnvError as exc:
                log(f"stopping a private broker failed: {exc}")
            shutil.rmtree(wd, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Backlog:
    topic: str
    records: int
    """Written, committed or aborted; sequence numbers 0 .. records - 1."""
    committed: int
    aborted: int


def aborted(seq: int) -> bool:
    return (seq // TXN_RECORDS) % ABORT_EVERY == ABORT_EVERY - 1


def value(seq: int) -> bytes:
    return b'{"n":%d,"pad":"%s"}' % (seq, b"x" * 100)


def sequence(raw: bytes | None) -> int:
    """The sequence number in a value written by :func:`value`; -1 for anything else."""
    if not raw or not raw.startswith(b'{"n":'):
        return -1
    try:
        return int(raw[5 : raw.index(b",")])
    except ValueError:
        return -1


def write_backlog(bootstrap: str, topic: str, records: int) -> Backlog:
    """Create ``topic`` and write ``records`` records into it, transactionally."""
    create_topic(bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-repl-source-{run_id()}",
            "linger.ms": 20,
            "batch.num.messages": 10000,
        }
    )
    producer.init_transactions(30)
    keys = distinct_keys(records)
    for start in range(0, records, TXN_RECORDS):
        producer.begin_transaction()
        for seq in range(start, min(records, start + TXN_RECORDS)):
            while True:
                try:
                    producer.produce(topic, value(seq), b"customer-%d" % (seq % keys))
                    break
                except BufferError:
                    producer.poll(0.05)
        if aborted(start):
            producer.flush(60)  # the aborted records are in the log, not just dropped
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
    failed = sum(1 for seq in range(records) if aborted(seq))
    return Backlog(topic, records, records - failed, failed)


class Collector(threading.Thread):
    """A read_committed consumer of ``topic`` on the target (waiting for it to exist),
    every partition from offset 0: what arrived, and when."""

    def __init__(self, bootstrap: str, topic: str, backlog: Backlog) -> None:
        super().__init__(daemon=True)
        self.topic, self.backlog = topic, backlog
        self.seen = bytearray(backlog.records)
        self.records = self.fresh = self.duplicates = self.aborted_seen = self.foreign = 0
        self.first_at: float | None = None
        self.complete_at: float | None = None
        self.last_fresh_at: float | None = None
        self.longest_pause = 0.0
        """The longest wait between two new committed records (a kill's outage)."""
        self.log_entries = 0
        """Sum of the partitions' end offsets: records, aborted records, markers."""
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-repl-{run_id()}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )

    def _assign(self) -> list[TopicPartition]:
        while not self.stop.is_set():
            meta = self._consumer.list_topics(timeout=10).topics.get(self.topic)
            if meta is not None and meta.error is None and meta.partitions:
                parts = [TopicPartition(self.topic, p, 0) for p in meta.partitions]
                self._consumer.assign(parts)
                return parts
            time.sleep(0.1)
        return []

    def _count(self, raw: bytes | None) -> None:
        self.records += 1
        seq = sequence(raw)
        if not 0 <= seq < self.backlog.records:
            self.foreign += 1
            return
        if aborted(seq):
            self.aborted_seen += 1
        elif self.seen[seq]:
            self.duplicates += 1
        else:
            self.fresh += 1
            now = time.monotonic()
            if self.last_fresh_at is not None:
                self.longest_pause = max(self.longest_pause, now - self.last_fresh_at)
            self.last_fresh_at = now
            if self.fresh == self.backlog.committed:
                self.complete_at = now
        self.seen[seq] = min(255, self.seen[seq] + 1)

    def run(self) -> None:
        try:
            parts = self._assign()
            while not self.stop.is_set():
                for message in self._consumer.consume(10_000, 0.1):
                    if message.error() is None:
                        self.first_at = self.first_at or time.monotonic()
                        self._count(message.value())
            for tp in parts:
                self.log_entries += self._consumer.get_watermark_offsets(tp, timeout=10)[1]
        except BaseException as exc:  # reported by measure()
            self.error = exc
        finally:
            self._consumer.close()


def measure(
    factory: ReplicatorFactory,
    clusters: Flow,
    records: int,
    kills: Sequence[float] = (),
    timeout: float = 600.0,
) -> dict[str, object]:
    """Replicate a fresh backlog of ``records`` from ``clusters.source`` to
    ``clusters.target`` (its topics are ignored: the backlog's topic is new) with the
    replicator ``factory`` makes, applying the kill schedule ``kills``; its figures."""
    topic = f"bench-repl-{run_id()}"
    workdir = clusters.workdir
    backlog = write_backlog(clusters.source, topic, records)
    replicator = factory(Flow(clusters.source, clusters.target, (topic,), workdir))
    collector = Collector(clusters.target, replicator.target_topic(topic), backlog)
    collector.start()
    started = time.monotonic()
    restarts: list[dict[str, float]] = []
    pending = sorted(kills)
    try:
        replicator.start()
        ready_at = time.monotonic()
        start_s = ready_at - started
        while collector.complete_at is None:
            if collector.error is not None or not collector.is_alive():
                raise RuntimeError(f"the target's consumer failed: {collector.error!r}")
            if time.monotonic() - started > timeout:
                raise RuntimeError(
                    f"{collector.fresh} of {backlog.committed} committed records reached the "
                    f"target in {timeout:.0f} s; see {workdir}"
                )
            if pending and collector.fresh >= pending[0] * backlog.committed:
                at = collector.fresh / backlog.committed
                killed = time.monotonic()
                replicator.kill()
                replicator.start()
                restarts.append({"at": round(at, 3), "restart_s": time.monotonic() - killed})
                pending.pop(0)
            time.sleep(0.05)
        time.sleep(SETTLE_S)
    finally:
        collector.stop.set()
        collector.join(60)
        replicator.stop()
    assert collector.first_at is not None and collector.complete_at is not None
    seconds = collector.complete_at - collector.first_at
    # From start() returning: what a transaction's size or the consumer's first fetch
    # cannot hide (records/s above starts at the first record the target shows).
    from_start = collector.complete_at - ready_at
    figures: dict[str, object] = {
        "records_written": backlog.records,
        "committed_in_source": backlog.committed,
        "aborted_in_source": backlog.aborted,
        "transaction_records": TXN_RECORDS,
        "start_s": round(start_s, 2),
        "seconds": round(seconds, 2),
        "records_per_s": round(backlog.committed / seconds) if seconds > 0 else None,
        # 0 when the first copy came before start() returned (ours is ready only once
        # every partition has fenced; a partition may copy before the last one has).
        "first_record_after_start_s": round(max(0.0, collector.first_at - ready_at), 2),
        "seconds_from_start": round(from_start, 2),
        "records_per_s_from_start": round(backlog.committed / from_start)
        if from_start > 0
        else None,
        "kill_schedule": list(kills),
        "kills": [{k: round(v, 2) for k, v in r.items()} for r in restarts],
        "longest_pause_s": round(collector.longest_pause, 2),
        "records_read_committed": collector.records,
        "lost": backlog.committed - collector.fresh,
        "duplicated": collector.duplicates,
        "aborted_seen": collector.aborted_seen,
        "foreign": collector.foreign,
        "log_entries_not_committed_records": collector.log_entries - collector.records,
    }
    log(
        f"replicated {backlog.committed:,} committed records in {seconds:.1f} s "
        f"({len(restarts)} kills): lost {figures['lost']}, duplicated {collector.duplicates}, "
        f"aborted seen {collector.aborted_seen}"
    )
    return figures
