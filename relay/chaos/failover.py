"""The fault ``lose_source_cluster``: a consumer group fails over to the target after
its source cluster is lost, as an operator lives it (docs/replication.md, "Failover
runbook", with ``--sync-groups``).

The chaos run's own source cluster serves everything else, so this fault brings a source
cluster it can lose: a broker of its own (relay.devenv.private), never the shared
development brokers. A `relay replicate --sync-groups GROUP` copies a topic of it to the
run's second cluster; a small consumer of GROUP processes the first records on the
source, committing after each; the producer writes more; the consumer stops (runbook
step 1) and the operator waits until a sync round ran after the replica held every
record (``relay_replicate_group_sync_age_seconds``). Then the source broker is killed
(SIGKILL) and the consumer starts on the target with the same group (step 2) and reads
to the end. relay.chaos.failover_checker counts what the group lost or processed again.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from relay import devenv
from relay.chaos.checker_inputs import KafkaAccess, read_topic
from relay.chaos.failover_checker import FailoverCount, SourceRecord, count_failover
from relay.chaos.faults import FaultContext, Outcome
from relay.chaos.preparation import REPLICA_PREFIX
from relay.chaos.topic_records import TopicRecord
from relay.devenv.cli_runner import relay_command
from relay.devenv.ports import free_ports
from relay.devenv.private import start_broker
from relay.errors import DevEnvError, FaultSkipped, RelayError
from relay.postgres.migrations import PROJECT_ROOT
from relay.replication.types import SOURCE_OFFSET_HEADER
from relay.runtime.clock import Clock, Deadline, wait_until

PARTITIONS = 2
RECORDS = 60  # written before the group consumes, and as many after
PROCESSED = 40  # of the first ones, processed on the source
SYNC_INTERVAL_S = 1.0
STEP_S = 90.0  # for each step: copying, a sync round, reading to the end


@dataclass(frozen=True, slots=True)
class FailoverRun:
    target: str  # the target cluster's bootstrap servers (it stays)
    workdir: Path  # the lost source broker's, and the replicator's log
    env: Mapping[str, str]  # `relay replicate`'s environment
    clock: Clock
    name: str  # of the topic; the group is NAME-app, the replicator's group NAME-replicator
    sync: bool = True  # False: no --sync-groups (the checker must then find records lost)

    @property
    def group(self) -> str:
        return f"{self.name}-app"


def lose_source_cluster(ctx: FaultContext) -> Outcome:
    ops = ctx.replica_ops
    if ops is None:
        raise FaultSkipped("no replicator in this run")
    name = f"chaos-failover-{len(ops.failovers) + 1}-{uuid.uuid4().hex[:6]}"
    run = FailoverRun(ops.target, ops.logs.parent / name, ops.replicate_env, ctx.clock, name)
    count, synced = run_failover(run)
    ops.failovers.append(count)
    return Outcome(
        f"source cluster of {name}",
        f"SIGKILL of its only broker after {synced}; the group's consumer started on the "
        f"target with the same group: {count.describe()}",
    )


def run_failover(run: FailoverRun) -> tuple[FailoverCount, str]:
    """The whole failover on a source broker of its own; the counts, and what the
    operator waited for before the loss."""
    broker = run.workdir / "source-broker"
    try:
        source = start_broker(broker)
    except DevEnvError as exc:
        raise FaultSkipped(f"the source broker to lose did not start: {exc}") from None
    try:
        return _failover(run, source, broker)
    finally:
        devenv.stop_kafka(broker, True)
        shutil.rmtree(broker, ignore_errors=True)


def _failover(run: FailoverRun, source: str, broker: Path) -> tuple[FailoverCount, str]:
    topic, copy = run.name, REPLICA_PREFIX + run.name
    _create_topic(source, topic)
    _produce(source, topic, range(RECORDS))
    (port,) = free_ports(1)
    replicator = _start_replicator(run, source, port)
    try:
        on_source = _process(source, topic, run.group, "earliest", PROCESSED)
        _produce(source, topic, range(RECORDS, 2 * RECORDS))  # not processed on the source
        written = [(r.partition, r.offset) for r in _read(source, topic)]

        def copied() -> bool:
            try:
                return len(_read(run.target, copy, 30.0)) >= len(written)
            except RelayError:  # not created yet
                return False

        if not wait_until(copied, STEP_S, clock=run.clock):
            raise FaultSkipped(f"{copy} did not hold every record in {STEP_S:g} s")
        settled = run.clock.monotonic()

        def synced() -> bool:
            age = _sync_age(port, run.group)
            return age is not None and age < run.clock.monotonic() - settled

        waited = "the replica held every record"
        if run.sync:
            waited += (
                ", then a sync round"
                if wait_until(synced, STEP_S, clock=run.clock)
                else f", and no sync round within {STEP_S:g} s"
            )
        devenv.stop_kafka(broker, True)  # the source cluster is lost
        # A consumer of a group without offsets starts at the end (auto.offset.reset
        # latest, as many applications do): a group not synced loses records visibly.
        on_target = _process(run.target, copy, run.group, "latest", None)
    finally:
        replicator.terminate()
        try:
            replicator.wait(60)
        except subprocess.TimeoutExpired:
            replicator.kill()
            replicator.wait()
    # The consumer stopped before the last sync round: nothing to reprocess.
    return count_failover(run.group, written, on_source, on_target, allowed=0), waited


def _start_replicator(run: FailoverRun, source: str, port: int) -> subprocess.Popen[bytes]:
    sync = ("--sync-groups", run.group, "--sync-interval", str(SYNC_INTERVAL_S))
    argv = relay_command(
        "replicate", "--source-bootstrap-servers", source, "--target-bootstrap-servers",
        run.target, "--topics", run.name, "--target-prefix", REPLICA_PREFIX,
        "--group", f"{run.name}-replicator", "--metrics-port", str(port),
        *(sync if run.sync else ()),
    )  # fmt: skip
    run.workdir.mkdir(parents=True, exist_ok=True)
    with (run.workdir / "replicate.log").open("ab") as out:
        return subprocess.Popen(
            argv,
            env=dict(run.env),
            cwd=PROJECT_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # gone before the broker is
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    except KafkaException as exc:
        raise FaultSkipped(f"creating {topic} failed: {exc}") from None


def _produce(bootstrap: str, topic: str, numbers: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in numbers:
        producer.produce(topic, key=str(n).encode(), value=f"{topic}:{n}".encode())
    if producer.flush(60) > 0:
        raise FaultSkipped(f"writing to {topic} did not complete")


def _read(bootstrap: str, topic: str, timeout: float = 60.0) -> list[TopicRecord]:
    return read_topic(KafkaAccess(bootstrap, {}), topic, timeout=timeout)


def _process(
    bootstrap: str, topic: str, group: str, reset: str, limit: int | None
) -> list[SourceRecord]:
    """The group's consumer: processes records of ``topic`` (``limit`` of them, or up to
    the end of each partition), committing after each; the source records processed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    done: list[SourceRecord] = []
    at_end: set[int] = set()
    deadline = Deadline(STEP_S)
    try:
        consumer.subscribe([topic])
        while limit is None or len(done) < limit:
            if deadline.remaining() <= 0:
                raise FaultSkipped(f"the group's consumer of {topic} did not finish in time")
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition() or 0)
                if limit is None and len(at_end) == PARTITIONS:
                    break
                continue
            if error is not None:
                continue  # a passing error; the consumer goes on
            at_end.discard(message.partition() or 0)
            done.append((message.partition() or 0, _source_offset(message)))
            consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()
    return done


def _source_offset(message: Message) -> int:
    """The copy's source offset (its header); on the source, the record's own."""
    found = dict(message.headers() or ()).get(SOURCE_OFFSET_HEADER)
    return int(found) if found is not None else int(message.offset() or 0)


def _sync_age(port: int, group: str) -> float | None:
    """``relay_replicate_group_sync_age_seconds`` of ``group``, as an operator reads it."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    wanted = f'relay_replicate_group_sync_age_seconds{{group="{group}"}} '
    for line in text.splitlines():
        if line.startswith(wanted):
            return float(line[len(wanted) :])
    return None
