"""A batch whose Kafka transaction outlasts transaction.timeout.ms is retried smaller,
not taken for another relay taking over (issue 11, point 5; I3).

The relay holds its first transaction open before the commit (failpoint ``hold``) until
the broker has aborted it for its age; then the commit finds the producer fenced. Being
fenced that late means the broker's timeout, not another instance: the relay rebuilds
the producer, shrinks its batches and publishes every row exactly once.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tests.integration.support import (
    PARTITION_ROWS,
    RelayTestEnv,
    assert_exactly_once_in_order,
    read_committed,
    start_relay,
    wait_until,
)
from tests.integration.writes import write_events

_TIMEOUT_MS = 2000


def _transactions_over(bootstrap: str, topic: str) -> bool:
    """Records reached ``topic`` and no transaction is open on it any more: the last
    stable offset (what read_committed may read up to) is the high watermark everywhere."""
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"watermarks-{uuid.uuid4().hex}",
                "isolation.level": isolation,
            }
        )
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            ends.append(
                [
                    consumer.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)[1]
                    for p in sorted(partitions)
                ]
            )
        finally:
            consumer.close()
    stable, high = ends
    return sum(high) > 0 and stable == high


def test_a_transaction_the_broker_aborted_for_its_age_is_retried_smaller(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    write_events(relay_env.database_url, topic, 300)
    ids = {int(i) for (i,) in relay_env.sql(PARTITION_ROWS, p=0)}
    held = tmp_path / "held"
    log = tmp_path / "relay.log"
    relay = start_relay(
        relay_env,
        "run",
        "--once",
        "--partitions",
        "0",
        log=log,
        RELAY_FAILPOINTS=f"before_commit=hold,once={held}",
        RELAY_TRANSACTION_TIMEOUT_MS=str(_TIMEOUT_MS),
    )
    try:
        wait_until(held.exists, 60, "the relay to hold its first transaction open")
        # The broker aborts a transaction older than its timeout on its next check (every
        # 10 s by default), which writes the abort markers and ends the transaction.
        wait_until(
            lambda: _transactions_over(relay_env.bootstrap_servers, topic),
            60,
            "the broker to abort the transaction held open",
        )
        Path(f"{held}.release").touch()
        assert relay.wait(120) == 0, log.read_text()
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
    output = log.read_text()
    assert "batch timed out, restarting the producer with a smaller batch" in output
    assert "as long as transaction.timeout.ms or longer" in output
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), ids)
