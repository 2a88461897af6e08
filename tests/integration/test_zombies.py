"""Zombies: a relay paused mid-transaction while another instance takes over."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from relay import devenv
from relay.chaos.processes import is_stopped
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
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
    assert zombie.returncode == 5, stderr
    assert "another relay instance initialised this partition's transactional id" in stderr
    assert "into a transaction, before transaction.timeout.ms" in stderr

    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)


@pytest.mark.serial  # restarts the shared PostgreSQL server
def test_a_running_relay_outlives_a_postgresql_restart(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path, devenv_workdir: Path | None
) -> None:
    """`relay run` keeps going through an immediate-mode PostgreSQL restart: the batch in
    flight is retried, nothing is lost or published twice."""
    if devenv_workdir is None:
        pytest.skip("restarts the local development PostgreSQL server")
    first = write_events(relay_env.database_url, topic, 300)
    log = tmp_path / "relay.log"
    service = start_relay(relay_env, "run", "--batch-size", "50", "--no-cleanup", log=log)
    try:
        wait_until(lambda: "published seq" in log.read_text(), 60, "a first batch")
        devenv.restart_postgres(devenv_workdir, mode="immediate")
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
