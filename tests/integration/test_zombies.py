"""Zombies: a relay paused mid-transaction while another instance takes over."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    is_stopped,
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
    assert "another relay instance took over this partition" in stderr

    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)
