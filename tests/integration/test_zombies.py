"""Zombies: a relay paused mid-transaction while another instance takes over."""

from __future__ import annotations

import signal
from pathlib import Path

from relay import devenv
from relay.chaos.process_tree import is_stopped
from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    migrate,
    new_prefix,
    read_committed,
    run_relay,
    start_relay,
    wait_until,
)
from tests.integration.writes import write_events


def test_paused_relay_is_fenced_by_a_new_instance_and_publishes_nothing_twice(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    committed = write_events(relay_env.database_url, topic, 800)
    zombie = start_relay(
        relay_env,
        "run",
        "--once",
        "--batch-size",
        "100",
        RELAY_FAILPOINTS=f"before_commit=stop,partition=0,once={tmp_path / 'paused'}",
    )
    try:
        wait_until(lambda: is_stopped(zombie.pid), 60, "the first relay to pause mid-batch")

        takeover = run_relay(relay_env, "run", "--once", "--batch-size", "100")
        assert takeover.returncode == 0, takeover.stderr

        zombie.send_signal(signal.SIGCONT)
        _, stderr = zombie.communicate(timeout=120)
    finally:
        if zombie.poll() is None:
            zombie.kill()
    both = f"zombie:\n{stderr}\ntakeover:\n{takeover.stderr}"
    try:
        assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{both}") from None
    assert zombie.returncode == 5, both
    assert "another relay instance initialised this partition's transactional id" in stderr, both
    assert "into a transaction, before transaction.timeout.ms" in stderr, both


def test_a_running_relay_outlives_a_postgresql_restart(
    private_postgres: tuple[Path, str], bootstrap_servers: str, topic: str, tmp_path: Path
) -> None:
    """`relay run` keeps going through an immediate-mode PostgreSQL restart: the batch in
    flight is retried, nothing is lost or published twice."""
    workdir, database_url = private_postgres
    migrate(database_url, RELAY_PARTITIONS)
    relay_env = RelayTestEnv(database_url, bootstrap_servers, new_prefix())
    first = write_events(relay_env.database_url, topic, 300)
    log = tmp_path / "relay.log"
    service = start_relay(
        relay_env, "run", "--batch-size", "50", "--no-cleanup", "--log-summary", "0.1", log=log
    )
    try:
        wait_until(lambda: " events in " in log.read_text(), 60, "a first batch")
        devenv.restart_postgres(workdir, mode="immediate")
        committed = first | write_events(relay_env.database_url, topic, 300)
        wait_until(
            lambda: (
                service.poll() is not None  # the relay died: reported below
                or len(read_committed(relay_env.bootstrap_servers, topic)) >= len(committed)
            ),
            90,
            "the relay to publish everything after the restart",
            explain=lambda: log.read_text()[-4000:],
        )
        assert service.poll() is None, log.read_text()[-3000:]
    finally:
        service.terminate()
        service.wait(60)
    assert service.returncode == 0, log.read_text()[-3000:]
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)
