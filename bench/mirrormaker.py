"""MirrorMaker 2: the peer of `relay replicate`, a dedicated MirrorMaker 2 cluster of Apache
Kafka 3.9.1 with exactly-once support, replicating between two private brokers.

The jars (org.apache.kafka:connect-mirror 3.9.1, its Connect runtime and kafka-tools) are
resolved from Maven Central by infra/mirrormaker/pom.xml into
.relay-dev/bench/mirrormaker-libs and run on Java 17 as
``org.apache.kafka.connect.mirror.MirrorMaker mm2.properties --clusters target``: one
node, one herder (source->target). Exactly-once in dedicated mode (Kafka >= 3.5) takes
``target.exactly.once.source.support = enabled`` (the target's herder becomes a KIP-618
exactly-once worker: each task writes its records and its source offsets in one
transaction, transactional id ``source-mm2-<connector>-<task>``), the internal REST server
of KIP-710 (``dedicated.mode.enable.internal.rest``, ``listeners``) and a read_committed
source consumer, without which MirrorSourceConnector reports exactly-once as
UNSUPPORTED. Every run checks that it was on: the transactional ids on the target
(TransactionsCommand), the task producer's transactional.id in MirrorMaker's log, and
transaction markers in the replicated topic.

``python -m bench --only mirrormaker`` measures it, then `relay replicate`
(bench/relay_replicate.py) on the same brokers (bench.replication: records/s, lost /
duplicated / aborted records seen, once clean and once under the kill schedule);
:func:`compare` sets any other replicator beside it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka.admin import AdminClient

from relay.devenv.ports import free_ports

from .common import ROOT, WORKDIR, Outcome, Row, log, maven_libs, run_id
from .relay_replicate import RelayReplicate
from .replication import Flow, Replicator, ReplicatorFactory, measure, two_brokers

LIBS = WORKDIR / "mirrormaker-libs"
POM = ROOT / "infra" / "mirrormaker" / "pom.xml"
MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
SOURCE, TARGET = "source", "target"
QUICK_RECORDS, FULL_RECORDS = 5_000, 1_000_000
"""Full size: enough for `relay replicate` to run 5 s or more (bench.caveats: a shorter
time measures start-up and scheduling, not throughput); 300,000 until 2026-11-26, which
it copied in 3.5-5 s."""
KILLS = (0.3, 0.7)
"""The kill schedule: SIGKILL (and restart) at these fractions of the committed records."""
QUICK_KILLS = (0.5,)
"""--quick, a smoke run: one kill, of `relay replicate` only. A killed MirrorMaker 2 takes
10-100 s to come back (a kill inside a transaction on its offsets topic leaves it open, and
the restarted worker reads that topic to its end before anything else, until the broker
aborts the transaction after the producer's 60 s timeout): the full run measures it."""

EXACTLY_ONCE = {
    f"{TARGET}.exactly.once.source.support": "enabled",
    "dedicated.mode.enable.internal.rest": "true",
    f"{SOURCE}.consumer.isolation.level": "read_committed",
}
"""What exactly-once takes in dedicated mode (ops docs, "Exactly Once"; listeners apart)."""
SINGLE_NODE = {
    key: "1"
    for key in (
        "replication.factor",
        "offset-syncs.topic.replication.factor",
        "heartbeats.topic.replication.factor",
        "checkpoints.topic.replication.factor",
        "offset.storage.replication.factor",
        "config.storage.replication.factor",
        "status.storage.replication.factor",
    )
}
LOG4J = """log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.connect.mirror=INFO
log4j.logger.org.apache.kafka.connect.runtime.Worker=INFO
log4j.logger.org.apache.kafka.clients.producer.ProducerConfig=INFO
log4j.logger.org.apache.kafka.connect.storage.KafkaOffsetBackingStore=INFO
"""
TOOLS_LOG4J = (
    "log4j.rootLogger=ERROR, stderr\nlog4j.appender.stderr=org.apache.log4j.varia.NullAppender\n"
)


def resolve_libs() -> Path:
    """MirrorMaker 2's jars (Maven, once; kept for later runs)."""
    return maven_libs(POM, LIBS, "connect-mirror-3.9.1.jar", "MirrorMaker 2 (connect-mirror 3.9.1)")


def properties(source: str, target: str, topics: Sequence[str], port: int) -> dict[str, str]:
    """mm2.properties: one flow source->target of ``topics``, exactly-once on the target."""
    return {
        "clusters": f"{SOURCE}, {TARGET}",
        f"{SOURCE}.bootstrap.servers": source,
        f"{TARGET}.bootstrap.servers": target,
        f"{SOURCE}->{TARGET}.enabled": "true",
        f"{SOURCE}->{TARGET}.topics": "|".join(t.replace(".", "\\.") for t in topics),
        **EXACTLY_ONCE,
        "listeners": f"http://127.0.0.1:{port}",
        **SINGLE_NODE,
        "sync.group.offsets.enabled": "false",  # no consumer groups are measured here
        "sync.topic.acls.enabled": "false",  # the brokers have no authorizer
    }


def _doubled(value: str) -> str:
    return value.replace("\\", "\\\\")


def target_transactional_ids(target: str, workdir: Path, libs: Path | None = None) -> list[str]:
    """The transactional ids the ``target`` cluster knows (kafka-tools TransactionsCommand
    list, from MirrorMaker 2's jars); ``workdir`` takes its log4j configuration."""
    libs = libs or resolve_libs()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tools-log4j.properties").write_text(TOOLS_LOG4J)
    listed = subprocess.run(
        [
            *("java", f"-Dlog4j.configuration=file:{workdir / 'tools-log4j.properties'}"),
            *("-cp", f"{libs}/*", "org.apache.kafka.tools.TransactionsCommand"),
            *("--bootstrap-server", target, "list"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()
    return sorted(line.split()[0] for line in listed[1:] if line.strip())


class MirrorMaker2:
    """A one-node dedicated MirrorMaker 2 cluster (a child process), for one Flow."""

    def __init__(self, flow: Flow, libs: Path | None = None) -> None:
        self.flow, self.libs = flow, libs or resolve_libs()
        self.dir = flow.workdir / f"mm2-{run_id()}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = properties(flow.source, flow.target, flow.topics, free_ports(1)[0])
        # java.util.Properties reads a backslash as an escape: the topics' regex needs two.
        text = "".join(f"{k} = {_doubled(v)}\n" for k, v in self.config.items())
        (self.dir / "mm2.properties").write_text(text)
        (self.dir / "log4j.properties").write_text(LOG4J.format(log=self.dir / "mm2.log"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _log4j(self, name: str) -> str:
        return f"-Dlog4j.configuration=file:{self.dir / name}"

    def target_topic(self, topic: str) -> str:
        return f"{SOURCE}.{topic}"  # DefaultReplicationPolicy

    def start(self, timeout: float = 180.0) -> None:
        """Launch MirrorMaker 2; return once every replicated topic exists on the target."""
        started = time.monotonic()
        with (self.dir / "console.log").open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    *("java", "-Xms256m", "-Xmx1g", self._log4j("log4j.properties")),
                    *("-cp", f"{self.libs}/*", MAIN, str(self.dir / "mm2.properties")),
                    *("--clusters", TARGET),
                ],
                cwd=self.dir,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1
        admin = AdminClient({"bootstrap.servers": self.flow.target})
        wanted = {self.target_topic(t) for t in self.flow.topics}
        while not wanted <= set(admin.list_topics(timeout=10).topics):
            if self.proc.poll() is not None:
                raise RuntimeError(f"MirrorMaker 2 exited {self.proc.returncode}; see {self.dir}")
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"MirrorMaker 2 created no {sorted(wanted)} in {timeout:.0f} s")
            time.sleep(0.2)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                log("MirrorMaker 2 did not stop in 60 s; killing it")
                self.kill()

    def transactional_ids(self) -> list[str]:
        """Transactional ids on the target (kafka-tools TransactionsCommand list)."""
        return target_transactional_ids(self.flow.target, self.dir, self.libs)

    def logged_transactional_ids(self) -> list[str]:
        """The ``transactional.id`` of every producer MirrorMaker 2 logged creating."""
        found = set()
        for line in (self.dir / "mm2.log").read_text(errors="replace").splitlines():
            key, _, val = line.strip().partition(" = ")
            if key == "transactional.id" and val != "null":
                found.add(val)
        return sorted(found)


@contextmanager
def running(
    source: str, target: str, topics: Sequence[str], workdir: Path
) -> Iterator[MirrorMaker2]:
    """MirrorMaker 2 replicating ``topics`` from ``source`` to ``target`` (bootstrap
    servers) for the ``with`` block, stopped cleanly afterwards."""
    mm2 = MirrorMaker2(Flow(source, target, tuple(topics), workdir))
    try:
        mm2.start()
        yield mm2
    finally:
        mm2.stop()


def _peer_run(
    flow: Flow, records: int, kills: Sequence[float], timeout: float
) -> dict[str, object]:
    """One MirrorMaker 2 measurement, with the evidence that exactly-once was on."""
    made: list[MirrorMaker2] = []

    def factory(flow: Flow) -> MirrorMaker2:
        made.append(MirrorMaker2(flow))
        return made[-1]

    figures = measure(factory, flow, records, kills, timeout)
    mm2 = made[0]
    on_target = mm2.transactional_ids()
    in_log = mm2.logged_transactional_ids()
    task_id = "source-mm2-MirrorSourceConnector-0"
    markers = figures["log_entries_not_committed_records"]
    assert isinstance(markers, int)
    if task_id not in on_target or task_id not in in_log or markers <= 0:
        raise RuntimeError(
            f"MirrorMaker 2 did not replicate transactionally: ids on the target {on_target}, "
            f"in its log {in_log}, {markers} markers; see {mm2.dir}"
        )
    shutil.rmtree(mm2.dir, ignore_errors=True)  # kept only when something failed
    return {
        **figures,
        "exactly_once_evidence": {
            "transactional_ids_on_target": on_target,
            "transactional_ids_in_log": in_log,
            "markers_and_aborted_entries_in_target_topic": markers,
        },
        "starts": mm2.starts,
    }


def _ours_run(
    ours: ReplicatorFactory, flow: Flow, records: int, kills: Sequence[float], timeout: float
) -> dict[str, object]:
    """One measurement of ``ours``; for `relay replicate`, with the evidence that it
    replicated transactionally and stopped cleanly, as for MirrorMaker 2."""
    made: list[Replicator] = []

    def factory(flow: Flow) -> Replicator:
        made.append(ours(flow))
        return made[-1]

    figures = measure(factory, flow, records, kills, timeout)
    replicator = made[0]
    if not isinstance(replicator, RelayReplicate):
        return figures
    on_target = target_transactional_ids(flow.target, replicator.dir)
    expected = replicator.transactional_ids()
    markers = figures["log_entries_not_committed_records"]
    assert isinstance(markers, int)
    missing = sorted(set(expected) - set(on_target))
    if missing or markers <= 0 or replicator.exit_codes[-1:] != [0]:
        raise RuntimeError(
            f"relay replicate did not replicate transactionally or stop cleanly: ids "
            f"missing on the target {missing}, {markers} markers, exit codes "
            f"{replicator.exit_codes}; see {replicator.dir}"
        )
    shutil.rmtree(replicator.dir, ignore_errors=True)  # kept only when something failed
    return {
        **figures,
        "exactly_once_evidence": {
            "transactional_ids_on_target": [i for i in on_target if i in expected],
            "markers_and_aborted_entries_in_target_topic": markers,
        },
        "starts": replicator.starts,
        "ready_s": replicator.ready_s,
        "exit_codes": replicator.exit_codes,
        "command": ["relay", *replicator.arguments("<source>", "<target>", "<port>")],
    }


def compare(ours: ReplicatorFactory | None, quick: bool) -> Outcome:
    """MirrorMaker 2, and ``ours`` (`relay replicate`'s factory) after it on the same two
    brokers, with the same backlog size and kill schedule: records/s in a clean run, then
    lost / duplicated / aborted records seen in a run killed at KILLS (--quick: QUICK_KILLS)."""
    records = QUICK_RECORDS if quick else FULL_RECORDS
    timeout = 300.0 if quick else 1200.0
    kill_at = QUICK_KILLS if quick else KILLS
    libs = resolve_libs()
    workdir = WORKDIR / f"replicate-{run_id()}"
    runs: dict[str, dict[str, object] | None] = {}
    with two_brokers(workdir) as (source, target):
        clusters = Flow(source, target, (), workdir)
        runs["mirrormaker2"] = _peer_run(clusters, records, (), timeout)
        if not quick:
            runs["mirrormaker2_killed"] = _peer_run(clusters, records, kill_at, timeout)
        if ours is not None:
            runs["ours"] = _ours_run(ours, clusters, records, (), timeout)
            runs["ours_killed"] = _ours_run(ours, clusters, records, kill_at, timeout)
    shutil.rmtree(workdir, ignore_errors=True)

    def figure(run: str, key: str) -> float:
        got = (runs.get(run) or {}).get(key)
        return float(got) if isinstance(got, int | float) else float("nan")

    def row(measurement: str, key: str, killed: bool, unit: str) -> Row:
        suffix = "_killed" if killed else ""
        return Row(
            measurement, figure(f"ours{suffix}", key), figure(f"mirrormaker2{suffix}", key), unit
        )

    committed = figure("mirrormaker2", "committed_in_source")
    kills = f"{len(kill_at)} kill(s) at {', '.join(f'{k:.0%}' for k in kill_at)}"
    outcome = Outcome()
    outcome.rows = [
        row(
            f"replicate {committed:,.0f} committed records: relay replicate vs MirrorMaker 2 (EOS)",
            "records_per_s",
            False,
            "records/s",
        ),
        row(
            "  ... records/s from start() returning to the last record, clean",
            "records_per_s_from_start",
            False,
            "records/s",
        ),
        row("  ... start-up, clean run (ours: /readyz, MM2: topic made)", "start_s", False, "s"),
        row("  ... first record after start-up, clean", "first_record_after_start_s", False, "s"),
        row(f"  ... records/s with {kills}", "records_per_s", True, "records/s"),
        row("  ... longest pause between new records, killed", "longest_pause_s", True, "s"),
        row("  ... duplicated after the kills", "duplicated", True, "records"),
        row("  ... lost after the kills", "lost", True, "records"),
        row("  ... aborted records seen after the kills", "aborted_seen", True, "records"),
    ]
    outcome.headline["mirrormaker2_records_per_s"] = figure("mirrormaker2", "records_per_s")
    if ours is not None:
        outcome.headline["replicate_records_per_s"] = figure("ours", "records_per_s")
        outcome.headline["replicate_vs_mirrormaker2"] = round(outcome.rows[0].ratio, 3)
        outcome.headline["replicate_vs_mirrormaker2_from_start"] = round(outcome.rows[1].ratio, 3)
        outcome.headline["replicate_vs_mirrormaker2_killed"] = {
            who: {
                key: figure(f"{run}_killed", key)
                for key in (
                    "records_per_s",
                    "longest_pause_s",
                    "duplicated",
                    "lost",
                    "aborted_seen",
                )
            }
            for who, run in (("relay_replicate", "ours"), ("mirrormaker2", "mirrormaker2"))
            if f"{run}_killed" in runs
        }
    outcome.raw["replicate"] = {
        "versions": sorted(p.name for p in libs.glob("connect-*.jar")),
        "mm2_properties": {
            k: v
            for k, v in properties("<source>", "<target>", ["<topic>"], 0).items()
            if "servers" not in k
        },
        **runs,
    }
    return outcome


def run(quick: bool) -> Outcome:
    """The bench section: MirrorMaker 2, then `relay replicate`, on the same brokers."""
    return compare(RelayReplicate, quick)
