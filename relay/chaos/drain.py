"""The end of a chaos run: drain the outbox, the topic and the replica with ``--once``
runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from sqlalchemy import Engine, text

from relay.chaos.checker_inputs import KafkaAccess, wait_until_stable
from relay.chaos.config import ChaosConfig
from relay.chaos.preparation import Environment
from relay.chaos.processes import run_logged
from relay.devenv.cli_runner import relay_command
from relay.errors import DrainError
from relay.runtime.clock import Clock, Deadline


def _run_until(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    done: Callable[[int], bool],
    deadline: Deadline,
    clock: Clock,
    log_path: Path,
) -> int:
    attempts = 0
    while True:
        attempts += 1
        remaining = deadline.remaining()
        if remaining <= 0:
            raise DrainError(f"{' '.join(argv[2:])} did not drain in time; see {log_path}")
        code = run_logged(argv, env, log_path, remaining)
        if done(code):
            return attempts
        clock.wait(1.0)


def drain(
    env: Environment,
    engine: Engine,
    config: ChaosConfig,
    *,
    clock: Clock,
    emit: Callable[[str], None],
) -> None:
    """Publish, mirror and replicate everything that was committed (every process is
    stopped)."""
    deadline = Deadline(config.drain_timeout_s, clock)
    logs = env.workdir / "logs"

    def outbox_empty(code: int) -> bool:
        if code != 0:
            return False
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM outbox")).scalar_one()) == 0

    runs = _run_until(
        relay_command("run", "--once"),
        # every process is stopped; a killed member stays in the group for a while
        env=env.env(RELAY_FENCE_MEMBERS="true"),
        done=outbox_empty,
        deadline=deadline,
        clock=clock,
        log_path=logs / "drain-relay.log",
    )
    emit(f"chaos: outbox drained ({runs} relay run --once)")
    runs = _run_until(
        relay_command("mirror", "--once"),
        env=env.env(),
        done=lambda c: c == 0,
        deadline=deadline,
        clock=clock,
        log_path=logs / "drain-mirror.log",
    )
    emit(f"chaos: mirror drained ({runs} relay mirror --once)")
    if env.replica_topic is None:
        return
    # --once copies up to the last stable offsets when it starts: no transaction of a
    # killed relay may still be open on the topic then.
    source = KafkaAccess(env.servers.bootstrap_servers, {})
    for topic in filter(None, (env.topic, env.ingest_topic)):
        wait_until_stable(source, topic, list(range(config.topic_partitions)), deadline)
    runs = _run_until(
        relay_command("replicate", "--once"),
        # every replicator is stopped; a killed member stays in the group for a while
        env=env.replicate_env(RELAY_REPLICATE_FENCE_MEMBERS="true"),
        done=lambda c: c == 0,
        deadline=deadline,
        clock=clock,
        log_path=logs / "drain-replicate.log",
    )
    emit(f"chaos: replica drained ({runs} relay replicate --once)")
