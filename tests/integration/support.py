"""Helpers for integration tests against the real PostgreSQL server and Kafka broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from relay.devenv import cli_runner
from relay.devenv.cli_runner import relay_command
from relay.devenv.reader import ReadRecord as Consumed
from relay.devenv.reader import read_committed
from relay.devenv.waiting import wait_until
from relay.postgres import migrations
from relay.runtime.secrets import Secret

__all__ = [
    "PROJECT_ROOT",
    "Consumed",
    "RelayTestEnv",
    "assert_exactly_once_in_order",
    "migrate",
    "new_prefix",
    "read_committed",
    "relay_command",
    "run_job",
    "run_relay",
    "run_sql",
    "start_relay",
    "stop_members",
    "wait_until",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RelayTestEnv:
    database_url: str
    bootstrap_servers: str
    prefix: str

    @property
    def positions_topic(self) -> str:
        return f"{self.prefix}-positions"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_DATABASE_URL=self.database_url,
            RELAY_KAFKA_BOOTSTRAP_SERVERS=self.bootstrap_servers,
            RELAY_TRANSACTIONAL_ID_PREFIX=self.prefix,
            RELAY_POSITIONS_TOPIC=self.positions_topic,
            RELAY_POSITIONS_GROUP=f"{self.prefix}-positions",
            RELAY_POLL_INTERVAL_S="0.1",
        )
        env.update(extra)
        return env

    def sql(self, statement: str, **params: object) -> list[tuple[object, ...]]:
        return run_sql(self.database_url, statement, **params)


def run_sql(database_url: str, statement: str, **params: object) -> list[tuple[object, ...]]:
    """One statement in a transaction of its own; its rows, if it returns any."""
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


# The ids of relay partition :p's rows in the outbox: drawn (outbox_positions) or not yet
# (outbox_undrawn, the partition the next draw gives them).
PARTITION_ROWS = (
    "SELECT id FROM outbox_positions WHERE partition = :p "
    "UNION ALL SELECT id FROM outbox_undrawn WHERE partition = :p"
)


def draw(database_url: str) -> int:
    """Draw the positions of what has committed (as the relay does before it reads:
    ``outbox_draw``, 0017_relay_drawn_positions), so that ``outbox_positions`` and
    ``outbox_commits`` show it; the highest position drawn."""
    ((drawn,),) = run_sql(database_url, "SELECT drawn FROM outbox_draw()")
    return int(drawn)  # type: ignore[call-overload]


def new_prefix() -> str:
    return f"it-{uuid.uuid4().hex[:10]}"


def migrate(database_url: str, partitions: int) -> None:
    migrations.upgrade(Secret(database_url))
    run_sql(database_url, "UPDATE outbox_settings SET partitions = :n", n=partitions)


def run_relay(
    env: RelayTestEnv, *args: str, timeout: float = 180, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    return cli_runner.run_relay(args, env.env(**extra_env), cwd=PROJECT_ROOT, timeout=timeout)


def run_job(
    script: str, env: Mapping[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``jobs/<script>`` (a Spark job) to completion with ``env``."""
    argv = [sys.executable, str(PROJECT_ROOT / "jobs" / script), *args]
    return cli_runner.run_python(argv, env, cwd=PROJECT_ROOT, timeout=timeout)


def start_relay(
    env: RelayTestEnv, *args: str, log: Path | None = None, **extra_env: str
) -> subprocess.Popen[str]:
    """`relay <args>` in the background (:func:`relay.devenv.cli_runner.start_relay`)."""
    return cli_runner.start_relay(args, env.env(**extra_env), cwd=PROJECT_ROOT, log=log)


def stop_members(
    members: Iterable[subprocess.Popen[str] | None], timeout_s: float = 90
) -> list[int | None]:
    """A test's teardown of processes it may have paused (SIGSTOP): each one still running
    resumed (SIGCONT) and asked to stop (SIGTERM: it finishes its transaction and leaves
    its group), all at once; then each one's exit code, killed when it has not exited
    within ``timeout_s`` (None for a member never started)."""
    started = list(members)
    for member in started:
        if member is not None and member.poll() is None:
            os.kill(member.pid, signal.SIGCONT)
            member.terminate()
    return [None if member is None else _exit_code(member, timeout_s) for member in started]


def _exit_code(member: subprocess.Popen[str], timeout_s: float) -> int:
    try:
        return member.wait(timeout_s)
    except subprocess.TimeoutExpired:
        member.kill()
        return member.wait()


def assert_exactly_once_in_order(consumed: Iterable[Consumed], expected_ids: set[int]) -> None:
    """Every expected outbox id exactly once, nothing else, and within each Kafka
    partition the records of each relay partition in ascending seq order."""
    records = list(consumed)
    ids = [r.outbox_id for r in records]
    duplicates = len(ids) - len(set(ids))
    assert duplicates == 0, f"{duplicates} duplicated records"
    missing = expected_ids - set(ids)
    assert not missing, f"{len(missing)} committed rows never published, e.g. {sorted(missing)[:5]}"
    unexpected = set(ids) - expected_ids
    assert not unexpected, f"{len(unexpected)} records that were never committed"
    last: dict[tuple[int, int], int] = {}
    for r in records:
        slot = (r.partition, r.relay_partition)
        assert r.seq > last.get(slot, 0), f"out of seq order in {slot}: {r.seq} after {last[slot]}"
        last[slot] = r.seq
