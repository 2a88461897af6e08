"""Debezium: the same backlog drained by the Debezium PostgreSQL connector and its outbox
event router, on a Kafka Connect distributed worker with exactly-once source support.

The worker (org.apache.kafka:connect-runtime 3.9.1) and the connector
(io.debezium:debezium-connector-postgres 2.7.3.Final) are resolved from Maven Central by
infra/debezium-pom.xml into .relay-dev/bench/connect-libs and run on Java 17 against the
durable cluster (wal_level=logical) and the shared broker. Debezium reads a trigger-less
table of the outbox's shape (it needs no sequencing of ours): a publication and a
pgoutput slot are created first, then the backlog is written, and the connector streams
it from the WAL (snapshot.mode=no_data). Timed from the connector's creation (REST POST)
to the last record in the topic for a read_committed consumer; the worker's start-up is
reported apart. Compared with `relay run --once` on the same number of rows (from the
drain comparison of the same run, or measured here when that was skipped).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition

from . import drain
from .common import (
    ROOT,
    WORKDIR,
    Outcome,
    Row,
    autocommit,
    create_topic,
    delete_topics,
    execute,
    fill_outbox,
    log,
    maven_libs,
    run_id,
    scratch_database,
)

LIBS = WORKDIR / "connect-libs"
POM = ROOT / "infra" / "debezium-pom.xml"
TABLE_DDL = """
CREATE TABLE debezium_outbox
    (LIKE outbox INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS);
ALTER TABLE debezium_outbox ALTER COLUMN partition DROP NOT NULL;
ALTER TABLE debezium_outbox ADD PRIMARY KEY (id);
"""
LOG4J = """log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.connect.runtime.WorkerSourceTask=INFO
log4j.logger.io.debezium.connector.postgresql.PostgresConnectorTask=INFO
"""


def resolve_libs() -> Path:
    """The worker's and the connector's jars (Maven, once; kept for later runs)."""
    return maven_libs(POM, LIBS, "debezium-connector-postgres-*.jar", "Kafka Connect and Debezium")


def _free_port() -> int:
    from relay.devenv.ports import free_ports

    return free_ports(1)[0]


class Worker:
    """A Kafka Connect distributed worker of its own (group, internal topics, REST port)."""

    def __init__(self, bootstrap: str, rid: str) -> None:
        self.dir = WORKDIR / f"connect-{rid}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.topics = [f"bench-connect-{rid}-{kind}" for kind in ("configs", "offsets", "status")]
        properties = {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-connect-{rid}",
            "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "config.storage.topic": self.topics[0],
            "offset.storage.topic": self.topics[1],
            "status.storage.topic": self.topics[2],
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "exactly.once.source.support": "enabled",
            "listeners": f"http://127.0.0.1:{self.port}",
            "rest.advertised.host.name": "127.0.0.1",
            "offset.flush.interval.ms": "1000",
        }
        config = self.dir / "worker.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        (self.dir / "log4j.properties").write_text(LOG4J.format(log=self.dir / "connect.log"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, libs: Path, timeout: float = 120) -> float:
        started = time.monotonic()
        with (self.dir / "console.log").open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    "java",
                    "-Xms256m",
                    "-Xmx1g",
                    f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
                    "-cp",
                    f"{libs}/*",
                    "org.apache.kafka.connect.cli.ConnectDistributed",
                    str(self.dir / "worker.properties"),
                ],
                cwd=self.dir,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        while True:
            try:
                if self.request("GET", "/connectors") == []:
                    return time.monotonic() - started
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if self.proc.poll() is not None or time.monotonic() - started > timeout:
                raise RuntimeError(f"Kafka Connect worker did not start; see {self.dir}")
            time.sleep(0.2)

    def request(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            raw = resp.read()
        return json.loads(raw) if raw else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Counter(threading.Thread):
    """A read_committed consumer from the start of ``topic``; when the first and the
    ``expected``-th record arrived."""

    def __init__(self, bootstrap: str, topic: str, expected: int) -> None:
        super().__init__(daemon=True)
        self.expected = expected
        self.count = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-dbz-{run_id()}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        meta = self._consumer.list_topics(topic, timeout=30).topics[topic]
        self._consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])

        self.log_entries = 0
        """Sum of the partitions' end offsets: records plus transaction markers."""

    def run(self) -> None:
        try:
            while not self.stop.is_set() and self.count < self.expected:
                got = [m for m in self._consumer.consume(10_000, 0.1) if m.error() is None]
                if got:
                    self.first_at = self.first_at or time.monotonic()
                    self.count += len(got)
            self.last_at = time.monotonic()
            for tp in self._consumer.assignment():
                self.log_entries += self._consumer.get_watermark_offsets(tp, timeout=10)[1]
        finally:
            self._consumer.close()


def connector_config(url: str, rid: str, slot: str, publication: str) -> dict[str, str]:
    db = sa.make_url(url)
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": str(db.host),
        "database.port": str(db.port),
        "database.user": str(db.username),
        "database.password": str(db.password),
        "database.dbname": str(db.database),
        "topic.prefix": f"bench-dbz-{rid}",
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": publication,
        "publication.autocreate.mode": "disabled",
        "table.include.list": "public.debezium_outbox",
        "snapshot.mode": "no_data",
        "exactly.once.support": "required",
        "tombstones.on.delete": "false",
        "transforms": "outbox",
        "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
        "transforms.outbox.table.field.event.id": "id",
        "transforms.outbox.table.field.event.key": "key",
        "transforms.outbox.table.field.event.payload": "value",
        "transforms.outbox.route.by.field": "topic",
        "transforms.outbox.route.topic.replacement": "${routedByValue}",
        "transforms.outbox.table.fields.additional.placement": "event_type:header:event-type",
        "transforms.outbox.table.expand.json.payload": "false",
    }


def measure(admin_url: str, bootstrap: str, rows: int, timeout: float) -> dict[str, object]:
    libs = resolve_libs()
    rid = run_id()
    topic = f"bench-dbz-{rid}"
    slot, publication = f"bench_slot_{rid}", f"bench_pub_{rid}"
    create_topic(bootstrap, topic)
    worker = Worker(bootstrap, rid)
    try:
        with scratch_database(admin_url, f"bench_dbz_{rid}", TABLE_DDL) as url:
            try:
                autocommit(url, f"CREATE PUBLICATION {publication} FOR TABLE debezium_outbox")
                execute(
                    url, "SELECT pg_create_logical_replication_slot(:slot, 'pgoutput')", slot=slot
                )
                fill_s = fill_outbox(url, "debezium_outbox", topic, rows)
                worker_s = worker.start(libs)
                counter = Counter(bootstrap, topic, rows)
                counter.start()
                created = time.monotonic()
                worker.request(
                    "POST",
                    "/connectors",
                    {
                        "name": f"bench-{rid}",
                        "config": connector_config(url, rid, slot, publication),
                    },
                )
                counter.join(timeout)
                counter.stop.set()
                if counter.count < rows or counter.last_at is None:
                    raise RuntimeError(
                        f"Debezium delivered {counter.count} of {rows} records in {timeout:.0f} s; "
                        f"see {worker.dir}"
                    )
                seconds = counter.last_at - created
                first_s = (counter.first_at or created) - created
            finally:
                worker.stop()
                execute(
                    url,
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = :slot",
                    slot=slot,
                )
    finally:
        delete_topics(bootstrap, [topic, *worker.topics])
    if counter.count != rows:
        raise RuntimeError(f"Debezium: {counter.count} records in {topic}, expected {rows}")
    if counter.log_entries <= counter.count:
        raise RuntimeError("Debezium wrote no transaction markers: exactly-once was not on")
    shutil.rmtree(worker.dir, ignore_errors=True)  # kept only when something failed
    result: dict[str, object] = {
        "rows": rows,
        "fill_s": round(fill_s, 2),
        "worker_start_s": round(worker_s, 2),
        "first_record_s": round(first_s, 2),
        "seconds": round(seconds, 2),
        "rows_per_s": round(rows / seconds),
        "rows_per_s_with_worker_start": round(rows / (seconds + worker_s)),
        "records_in_topic": counter.count,
        "transaction_markers_in_topic": counter.log_entries - counter.count,
        "versions": sorted(
            p.name
            for p in libs.glob("*.jar")
            if p.name.startswith(("debezium-connector-postgres", "connect-runtime"))
        ),
        "exactly_once_source_support": True,
        "snapshot_mode": "no_data (slot created before the rows were written)",
    }
    log(
        f"drain debezium: {rows} rows in {seconds:.1f} s after connector creation "
        f"(worker start {worker_s:.1f} s)"
    )
    return result


def run(admin_url: str, bootstrap: str, quick: bool, done: dict[str, Outcome]) -> Outcome:
    rows = drain.QUICK_ROWS if quick else drain.FULL_ROWS
    figures = measure(admin_url, bootstrap, rows, timeout=300 if quick else 900)
    previous = done.get("drain")
    ours_raw = previous.raw.get("drain") if previous else None
    if isinstance(ours_raw, dict):
        ours = ours_raw["relay_run_once"]
    else:
        ours = drain.drain_once(admin_url, bootstrap, "relay_run_once", rows)
    assert isinstance(ours, dict)
    ours_rate = float(ours["rows_per_s"])
    outcome = Outcome()
    theirs = figures["rows_per_s"]
    assert isinstance(theirs, int)
    outcome.rows.append(
        Row(f"drain {rows:,} rows: relay run --once vs Debezium (EOS)", ours_rate, theirs, "rows/s")
    )
    with_start = figures["rows_per_s_with_worker_start"]
    assert isinstance(with_start, int)
    outcome.rows.append(
        Row("  ... Debezium counting its worker's start-up", ours_rate, with_start, "rows/s")
    )
    outcome.headline["drain_vs_debezium"] = round(ours_rate / theirs, 3)
    outcome.raw["debezium"] = {**figures, "relay_run_once_rows_per_s": ours_rate}
    return outcome
