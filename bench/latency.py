"""Latency: from a service's commit to the event in Kafka and to the mirrored row.

A continuous `relay run` and a continuous `relay mirror` run against a fresh database on
the durable cluster while a writer (8 threads, one connection each) commits one event
per transaction (the INSERT of ``relay.publish``) at a fixed rate (1,000 events/s for 60 s;
``--quick``: 10 s). Each event's value carries ``ts``, the writer's clock just before its
INSERT and COMMIT (so the commit itself is inside the latency). Measured: the time until
a read_committed consumer (a process of its own, ``bench.latency_receiver``; until
2026-11-28 a thread of this one, beside the writers) receives the record, and until the
mirrored row is committed (``pg_xact_commit_timestamp`` of the row's transaction: the
cluster tracks commit timestamps; same host, same clock; until 2026-11-28 the row's
insert's ``clock_timestamp()``, a few ms before its commit). Variants: the defaults with the
benchmark's 8 relay partitions; 2 relay partitions (a quarter of the Kafka transactions
per second for the same events: on this machine the broker's transactions, not the
relay's polling, set the latency); `--partition-transactions` (one Kafka transaction per
relay partition and batch, the default before one per process and cycle); and the
defaults without the mirror (``relay_alone``), so that what the mirror's share of the
two cores costs and the relay's own latency are told apart. Each variant also reports
how busy the machine's cores were while the writer ran, and the CPU `relay run` used.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass

import psycopg

from relay.devenv.databases import libpq_url
from relay.devenv.waiting import wait_until

from .common import (
    RELAY_PARTITIONS,
    WORKDIR,
    Outcome,
    Row,
    create_topic,
    delete_topics,
    execute,
    log,
    percentile,
    relay_cli,
    relay_env,
    run_id,
    scratch_database,
)
from .latency_receiver import Receiver

RATE = 1000
WRITER_THREADS = 8
INSERT = (
    "INSERT INTO outbox (topic, key, value, event_type, headers) VALUES (%s, %s, %s, NULL, '[]')"
)
WARM_UP_EVENTS = 20
FIRST_MEASURED = 1_000_000
TABLE_DDL = """
CREATE TABLE latency_events (
    id bigint PRIMARY KEY, ts double precision NOT NULL, source_seq bigint NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp())
"""
MAPPING = """
[[tables]]
table = "latency_events"
topics = ["{topic}"]
key = {{ pattern = '^ev-(?P<id>[0-9]+)$' }}
version = {{ column = "source_seq", source = "header:outbox-seq" }}
columns = {{ ts = "ts" }}
"""
VARIANTS = {
    "defaults": RELAY_PARTITIONS,
    "2_relay_partitions": 2,
    "partition_transactions": RELAY_PARTITIONS,
    "relay_alone": RELAY_PARTITIONS,
}
"""Variant name -> relay partitions (the relay's and the mirror's settings are defaults,
but for those of VARIANT_ENV)."""
VARIANT_ENV = {"partition_transactions": {"RELAY_PROCESS_TRANSACTIONS": "false"}}
"""Variant name -> the relay's settings that differ (`relay run --partition-transactions`:
one Kafka transaction per relay partition and batch, the default before one per process
and cycle)."""
WITHOUT_MIRROR = frozenset({"relay_alone"})
"""Variants that run no `relay mirror` (their mirror latency is not measured)."""


@dataclass(frozen=True, slots=True)
class Plan:
    seconds: float
    variants: tuple[str, ...]


FULL = Plan(60, tuple(VARIANTS))
QUICK = Plan(10, tuple(VARIANTS))


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The machine's busy and total jiffies (/proc/stat) and a process's (utime + stime)."""

    busy: int
    total: int
    process: int

    @classmethod
    def now(cls, pid: int) -> CpuTimes:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle, iowait
        with open(f"/proc/{pid}/stat") as stat:
            after_name = stat.read().rsplit(")", 1)[1].split()
        return cls(sum(fields) - idle, sum(fields), int(after_name[11]) + int(after_name[12]))

    def since(self, before: CpuTimes, seconds: float) -> dict[str, float]:
        """The cores' busy share (%) and the process's CPU (% of one core) in between."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = max(1, self.total - before.total)
        return {
            "machine_busy_pct": round(100 * (self.busy - before.busy) / total, 1),
            "relay_cpu_pct_of_a_core": round(
                100 * (self.process - before.process) / ticks / seconds, 1
            ),
        }


def write(url: str, topic: str, first: int, count: int, rate: float) -> float:
    """Commit events ``first`` .. ``first + count - 1``, one per transaction, at ``rate``
    per second over WRITER_THREADS connections; returns the seconds it took. Each
    transaction is the INSERT that ``relay.publish`` issues (psycopg directly: a Python
    writer through SQLAlchemy cannot keep 1,000 commits/s next to the relay and the mirror
    on two cores)."""
    counter = itertools.count(first)
    lock = threading.Lock()
    started = time.monotonic()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with psycopg.connect(libpq_url(url)) as conn:
                while True:
                    with lock:
                        n = next(counter)
                    if n >= first + count:
                        return
                    delay = started + (n - first) / rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    value = json.dumps({"n": n, "ts": time.time()}).encode()
                    conn.execute(INSERT, (topic, f"ev-{n}".encode(), value), prepare=True)
                    conn.commit()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(WRITER_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - started


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _summary(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "p50_ms": round(percentile(ms, 0.5), 1),
        "p99_ms": round(percentile(ms, 0.99), 1),
        "max_ms": round(max(ms, default=float("nan")), 1),
    }


def measure(admin_url: str, bootstrap: str, seconds: float, variant: str) -> dict[str, object]:
    rid = run_id()
    partitions = VARIANTS[variant]
    topic = f"bench-latency-{rid}"
    mapping = WORKDIR / f"latency-{rid}.toml"
    mapping.write_text(MAPPING.format(topic=topic))
    create_topic(bootstrap, topic)
    receiver = Receiver(
        bootstrap, topic, f"bench-latency-{rid}", FIRST_MEASURED, WORKDIR / f"latency-{rid}.json"
    )
    try:
        setup = f"{TABLE_DDL};\nUPDATE outbox_settings SET partitions = {partitions}"
        with scratch_database(admin_url, f"bench_latency_{rid}", setup) as url:
            env = relay_env(
                url,
                bootstrap,
                f"bench-{rid}",
                RELAY_MIRROR_CONFIG=str(mapping),
                RELAY_MIRROR_GROUP=f"bench-{rid}",
                **VARIANT_ENV.get(variant, {}),
            )
            procs: list[subprocess.Popen[bytes]] = []
            try:  # the processes stop before their database is dropped, on errors too
                mirrors = variant not in WITHOUT_MIRROR
                with (WORKDIR / f"latency-{variant}.log").open("wb") as out:
                    for args in (("run",), ("mirror",)) if mirrors else (("run",),):
                        procs.append(
                            subprocess.Popen(relay_cli(*args), env=env, stdout=out, stderr=out)
                        )
                receiver.start()
                receiver.ready.wait(30)
                write(url, topic, 1, WARM_UP_EVENTS, 100)  # all running, the group assigned
                wait_until(
                    lambda: (
                        (_mirrored(url, 0) if mirrors else receiver.received()) >= WARM_UP_EVENTS
                    ),
                    60,
                    "the warm-up events",
                )
                count = int(RATE * seconds)
                before = CpuTimes.now(procs[0].pid)
                took = write(url, topic, FIRST_MEASURED, count, RATE)
                cpu = CpuTimes.now(procs[0].pid).since(before, took)
                if mirrors:
                    wait_until(lambda: _mirrored(url, FIRST_MEASURED) >= count, 30, "the mirror")
                wait_until(
                    lambda: receiver.measured() >= count,
                    30,
                    "the consumer",
                )
                rows = execute(
                    url,
                    "SELECT ts, extract(epoch FROM pg_xact_commit_timestamp(xmin)) "
                    "FROM latency_events "
                    "WHERE id >= :first",
                    first=FIRST_MEASURED,
                )
            finally:
                receiver.finish()
                for proc in procs:
                    _stop(proc)
    finally:
        mapping.unlink(missing_ok=True)
        delete_topics(bootstrap, [topic, f"bench-{rid}-positions"])
    kafka = [v for n, v in receiver.latencies.items() if n >= FIRST_MEASURED]
    mirrored = [float(applied) - float(ts) for ts, applied in rows]  # type: ignore[arg-type]
    result: dict[str, object] = {
        "events": count,
        "target_rate": RATE,
        "achieved_rate": round(count / took),
        "relay_partitions": partitions,
        "kafka": {"received": len(kafka), **_summary(kafka)},
        "commit_markers_per_s": round(receiver.markers / took, 1),
        **cpu,
    }
    if mirrored:
        result["mirror"] = {"applied": len(mirrored), **_summary(mirrored)}
    log(f"latency {variant}: {json.dumps(result)}")
    return result


def _mirrored(url: str, first: int) -> int:
    value = execute(url, "SELECT count(*) FROM latency_events WHERE id >= :first", first=first)[0][
        0
    ]
    assert isinstance(value, int)
    return value


def run(admin_url: str, bootstrap: str, quick: bool) -> Outcome:
    plan = QUICK if quick else FULL
    figures = {v: measure(admin_url, bootstrap, plan.seconds, v) for v in plan.variants}
    outcome = Outcome()
    for variant, got in figures.items():
        for target in ("kafka", "mirror"):
            part = got.get(target)
            if not isinstance(part, dict):
                continue  # no mirror in this variant
            outcome.rows.append(
                Row(
                    f"latency p99 commit -> {target}, {variant} ({RATE} ev/s)",
                    part["p99_ms"],
                    float("nan"),
                    "ms",
                )
            )
    defaults = figures["defaults"]
    kafka, mirrored = defaults["kafka"], defaults["mirror"]
    assert isinstance(kafka, dict) and isinstance(mirrored, dict)
    alone = figures["relay_alone"]["kafka"]
    assert isinstance(alone, dict)
    outcome.headline.update(
        latency_p99_ms=kafka["p99_ms"],
        mirror_latency_p99_ms=mirrored["p99_ms"],
        latency_relay_alone_p99_ms=alone["p99_ms"],
        latency_machine_busy_pct=defaults["machine_busy_pct"],
        latency_seconds=plan.seconds,
    )
    outcome.raw["latency"] = figures
    return outcome
