"""I4 under rebalances: two `relay mirror` processes in one consumer group, one joining
and one leaving (cooperative-sticky), and a zombie paused mid-batch until the group gave
its partitions away. No record is applied twice, none is skipped.

The zombie pauses either before its batch's transaction (it wakes up and its
compare-and-set finds the offset moved) or inside it, holding the offset row lock: then
PostgreSQL ends its session after ``idle_in_transaction_session_timeout``, the new owner
proceeds, and the zombie's commit fails; its retry meets the moved offset."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from relay.chaos.process_tree import is_stopped
from tests.integration.mirror_support import (
    TxProducer,
    audit_count,
    audit_duplicates,
    expected_items,
    items_mapping,
    items_state,
    last_stable_offsets,
    mirror_env,
    records_of,
)
from tests.integration.support import wait_until

GROUP_TIMING = "session.timeout.ms=6000;heartbeat.interval.ms=500"


@pytest.mark.parametrize("pause_at", ["mirror_before_apply", "mirror_after_apply"])
def test_rebalances_and_a_paused_zombie_apply_each_record_exactly_once(
    database_url: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    pause_at: str,
) -> None:
    topic = make_topic("mirror-rebalance", partitions=4)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    producer = TxProducer(bootstrap_servers)
    produced: list[tuple[int, dict[str, object]]] = []

    def produce(count: int) -> None:
        batch = [
            (n % 300, {"name": f"n{n}", "qty": n})
            for n in range(len(produced), len(produced) + count)
        ]
        produced.extend(batch)
        producer.in_transactions(topic, records_of(batch), size=50)

    def caught_up() -> bool:
        return env.offsets() == last_stable_offsets(bootstrap_servers, topic)

    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    paused = tmp_path / "paused"
    produce(400)
    timing = {
        "RELAY_KAFKA_PROPERTIES": GROUP_TIMING,
        "RELAY_MIRROR_IDLE_TRANSACTION_TIMEOUT_S": "3",
    }
    a = env.start(log_a, "--batch-size", "50", **timing)
    b: subprocess.Popen[str] | None = None
    try:
        wait_until(caught_up, 60, "the first consumer to apply the backlog")

        # A second consumer joins: the group rebalances and hands it some partitions.
        # It pauses (SIGSTOP) in its first batch.
        b = env.start(
            log_b,
            "--batch-size",
            "50",
            RELAY_FAILPOINTS=f"{pause_at}=stop,once={paused}",
            **timing,
        )
        wait_until(lambda: "assigned" in log_b.read_text(), 60, "the second consumer's share")
        produce(400)
        wait_until(lambda: b is not None and is_stopped(b.pid), 60, "the second one to pause")

        # Its session times out; the first consumer takes its partitions back, starting
        # from the stored offsets, and applies what the paused one had fetched.
        produce(200)
        wait_until(caught_up, 90, "the first consumer to take over the paused one's partitions")
        b.send_signal(signal.SIGCONT)  # the zombie wakes up with a stale batch, tries it,
        wait_until(  # and only then learns from the group that it lost its partitions
            lambda: "lost partitions" in log_b.read_text(), 60, "the zombie to notice"
        )

        produce(300)
        a.send_signal(signal.SIGTERM)  # leaves the group: the other one gets everything
        assert a.wait(60) == 0, log_a.read_text()[-3000:]
        produce(300)
        wait_until(caught_up, 90, "the remaining consumer to apply everything")
        b.send_signal(signal.SIGTERM)
        assert b.wait(60) == 0, log_b.read_text()[-3000:]
    finally:
        for process in (a, b):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()

    assert audit_duplicates(env) == [], "records applied twice"
    assert audit_count(env) == len(produced), "records skipped"
    assert items_state(env) == expected_items(produced)
    # The zombie's stale batch was rolled back by the compare-and-set of the offset.
    assert "moved the stored offset (this instance expected offset" in log_b.read_text()
    _check_both_worked(log_a, log_b)


def _check_both_worked(log_a: Path, log_b: Path) -> None:
    for log in (log_a, log_b):
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]
        assert "mirrored" in text  # the summary printed at a clean exit
