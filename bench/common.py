"""What the benchmarks share: the servers, fresh migrated databases, backlogs, Kafka
helpers, measured child processes and the shape of a result."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from confluent_kafka.admin import AdminClient
from sqlalchemy.pool import NullPool

from relay.devenv import databases, reader, topics
from relay.devenv.cli_runner import relay_command
from relay.devenv.databases import libpq_url
from relay.postgres import migrations
from relay.runtime.secrets import Secret

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
WORKDIR = ROOT / ".relay-dev" / "bench"
RELAY_PARTITIONS = 8
KAFKA_PARTITIONS = 6
BATCH_SIZE = 5000
"""Rows per Kafka transaction for every forward peer (the relay's default batch size)."""
EVENT_TYPE = "CustomerChanged"


def endpoints() -> tuple[str, str]:
    """(admin database URL, bootstrap servers): RELAY_* variables, else `relay dev up`."""
    url = os.environ.get("RELAY_ADMIN_DATABASE_URL") or os.environ.get("RELAY_DATABASE_URL")
    bootstrap = os.environ.get("RELAY_KAFKA_BOOTSTRAP_SERVERS")
    if url and bootstrap:
        return url, bootstrap
    from relay import devenv

    found = devenv.up()
    return found.admin_database_url, found.bootstrap_servers


def run_id() -> str:
    return uuid.uuid4().hex[:8]


# --- result shape --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the printed table: our figure, the peer's, ours / peer."""

    measurement: str
    ours: float
    peer: float
    unit: str

    @property
    def ratio(self) -> float:
        return self.ours / self.peer if self.peer else float("nan")


@dataclass(slots=True)
class Outcome:
    """What one comparison hands back: table rows, the headline keys of latest.json and
    every raw figure behind them."""

    rows: list[Row] = field(default_factory=list)
    headline: dict[str, object] = field(default_factory=dict)
    raw: dict[str, object] = field(default_factory=dict)


def write_latest(payload: Mapping[str, object]) -> Path:
    """Write ``bench/results/latest.json`` (and a timestamped copy); returns its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n"
    (RESULTS / f"run_{time.strftime('%Y%m%d_%H%M%S')}.json").write_text(text)
    latest = RESULTS / "latest.json"
    latest.write_text(text)
    return latest


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- databases -----------------------------------------------------------------------------


def engine(url: str, **options: object) -> sa.Engine:
    return sa.create_engine(url, poolclass=NullPool, **options)


def execute(url: str, statement: str, **params: object) -> list[tuple[object, ...]]:
    """One statement in a transaction of its own; its rows, if it returns any."""
    eng = engine(url)
    try:
        with eng.begin() as conn:
            result = conn.execute(sa.text(statement), params)
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        eng.dispose()


def scalar(url: str, statement: str, **params: object) -> object:
    return execute(url, statement, **params)[0][0]


def autocommit(url: str, *statements: str) -> None:
    eng = engine(url, isolation_level="AUTOCOMMIT")
    try:
        with eng.connect() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        eng.dispose()


def database_url(admin_url: str, name: str) -> str:
    return sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def fresh_database(admin_url: str, name: str, setup_sql: str = "") -> str:
    """Create database ``name``, apply the migrations with RELAY_PARTITIONS relay partitions
    (as tests/integration/support.py ``migrate()`` does), run ``setup_sql``; its URL."""
    autocommit(admin_url, f'CREATE DATABASE "{name}"')
    url = database_url(admin_url, name)
    migrations.upgrade(Secret(url))
    execute(url, f"UPDATE outbox_settings SET partitions = {RELAY_PARTITIONS}")
    if setup_sql:
        execute(url, setup_sql)
    return url


def drop_database(admin_url: str, name: str) -> None:
    databases.drop_database(libpq_url(admin_url), name)


@contextmanager
def scratch_database(admin_url: str, prefix: str, setup_sql: str = "") -> Iterator[str]:
    """A fresh migrated database for the ``with`` block, dropped afterwards."""
    name = f"{prefix}_{run_id()}"
    try:
        yield fresh_database(admin_url, name, setup_sql)
    finally:
        drop_database(admin_url, name)


def server_settings(url: str) -> dict[str, str]:
    """The server's version and every setting not at its built-in default."""
    rows = execute(
        url,
        "SELECT name, setting || coalesce(' ' || unit, '') FROM pg_settings "
        "WHERE source NOT IN ('default', 'override', 'client', 'session') "
        "OR name IN ('fsync', 'synchronous_commit', 'wal_level', 'full_page_writes', "
        "'wal_sync_method', 'shared_buffers', 'max_wal_size', 'autovacuum') ORDER BY name",
    )
    settings = {str(k): str(v) for k, v in rows}
    settings["server_version"] = str(scalar(url, "SHOW server_version"))
    return settings


# --- backlogs ------------------------------------------------------------------------------


def distinct_keys(rows: int) -> int:
    """How many keys a backlog of ``rows`` events spreads over (one tenth, at least 1000)."""
    return max(1000, rows // 10)


def value_sql(n: str) -> str:
    """SQL for the JSON value of event ``n`` (the same bytes Python's fill would write)."""
    return (
        f"convert_to('{{\"n\":' || {n} || ',\"pad\":\"' || repeat('x', 100) || "
        "'\",\"ts\":' || extract(epoch from clock_timestamp()) || '}', 'UTF8')"
    )


def fill_outbox(url: str, table: str, topic: str, rows: int, chunk: int = 50_000) -> float:
    """Insert ``rows`` events into ``table`` (the outbox, or a trigger-less copy of it), in
    transactions of ``chunk`` rows; returns the seconds taken. Keys ``customer-<n % keys>``,
    a JSON value of ~130 bytes, event type CustomerChanged, no user headers. Into the
    outbox they go through its triggers, as any INSERT does (the write path's cost per
    service transaction is what bench/write_path.py measures)."""
    keys = distinct_keys(rows)
    columns = "topic, key, value, event_type, headers"
    select = (
        f"SELECT CAST(:topic AS text) AS topic, convert_to('customer-' || (n % {keys}), 'UTF8') "
        f"AS key, {value_sql('n')} AS value, '{EVENT_TYPE}' AS event_type, '[]'::jsonb AS headers "
        "FROM generate_series(CAST(:start AS bigint), CAST(:stop AS bigint)) AS n ORDER BY n"
    )
    eng = engine(url)
    started = time.monotonic()
    try:
        for start in range(0, rows, chunk):
            with eng.begin() as conn:
                conn.execute(
                    sa.text(f"INSERT INTO {table} ({columns}) {select}"),
                    {"topic": topic, "start": start, "stop": min(rows, start + chunk) - 1},
                )
    finally:
        eng.dispose()
    return time.monotonic() - started


# --- Kafka ---------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int = KAFKA_PARTITIONS) -> None:
    topics.create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, partitions)


def delete_topics(bootstrap: str, names: Sequence[str]) -> None:
    """Delete ``names`` (best effort: a benchmark's leftovers, not its result)."""
    topics.delete_topics(AdminClient({"bootstrap.servers": bootstrap}), names)


def count_records(bootstrap: str, topic: str, timeout: float = 120.0) -> int:
    """Records a read_committed consumer sees in ``topic`` (all partitions, from the start)."""
    return reader.count_committed(bootstrap, topic, timeout)


# --- child processes -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measured:
    """A finished child process: wall seconds, peak RSS (MiB), exit code, output tail."""

    seconds: float
    peak_rss_mib: float
    returncode: int
    output: str


def run_measured(
    command: Sequence[str], env: Mapping[str, str], timeout: float = 3600.0
) -> Measured:
    """Run ``command`` to completion; wall time including start-up, and the peak RSS of
    the child process itself (VmHWM of /proc/<pid>/status, read every 20 ms; not its own
    children, e.g. Spark's JVM). Not ``ru_maxrss``: a child started with vfork inherits
    this process's high-water mark."""
    log_path = WORKDIR / "last-child.log"
    WORKDIR.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("w") as out:
        proc = subprocess.Popen(
            list(command), env=dict(env), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            status, peak_kib = _wait(proc.pid, timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - started
    output = log_path.read_text(errors="replace")[-4000:]
    result = Measured(elapsed, peak_kib / 1024, proc.returncode, output)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{output}")
    return result


def _high_water_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _wait(pid: int, timeout: float) -> tuple[int, int]:
    """(wait status, peak VmHWM in KiB) of child ``pid``."""
    deadline = time.monotonic() + timeout
    peak = 0
    while True:
        peak = max(peak, _high_water_kib(pid))
        found, status = os.waitpid(pid, os.WNOHANG)
        if found:
            return status, peak
        if time.monotonic() > deadline:
            raise TimeoutError(f"child {pid} still running after {timeout:.0f} s")
        time.sleep(0.02)


def relay_env(url: str, bootstrap: str, prefix: str, **extra: str) -> dict[str, str]:
    """Environment of a relay or mirror child: the bench database and broker, its own
    transactional ids and positions, and nothing else of the caller's RELAY_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        RELAY_DATABASE_URL=url,
        RELAY_KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        RELAY_TRANSACTIONAL_ID_PREFIX=prefix,
        RELAY_POSITIONS_TOPIC=f"{prefix}-positions",
        RELAY_POSITIONS_GROUP=f"{prefix}-positions",
    )
    env.update(extra)
    return env


def maven_libs(pom: Path, libs: Path, marker: str, what: str) -> Path:
    """The jars ``pom`` resolves, copied into ``libs`` by Maven once (a jar matching
    ``marker`` there means done) and kept for later runs."""
    if libs.is_dir() and any(libs.glob(marker)):
        return libs
    staging = libs.with_name(libs.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    log(f"resolving {what} from Maven Central (once)")
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ],
        check=True,
    )
    staging.rename(libs)
    return libs


def relay_cli(*args: str) -> list[str]:
    return relay_command("--log-level", "WARNING", *args)


def job(script: str, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "jobs" / script), "--log-level", "WARNING", *args]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values``, nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))
    return ordered[index]
