"""A commit whose outcome is unknown does not stall a partition (issue 11, point 4; I3).

The broker stops (SIGSTOP) exactly across a batch's commit, for longer than the relay's
timeouts: the commit and the abort time out and librdkafka refuses every later
transaction. `relay run` must rebuild the producer, fence again, read the position again
(with or without the batch in doubt) and go on, publishing every row exactly once.

The broker is the test's own: the shared development broker is never stopped.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from relay import devenv
from relay.chaos.process_tree import is_stopped
from relay.devenv.private import start_broker
from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    migrate,
    new_prefix,
    read_committed,
    start_relay,
    wait_until,
)
from tests.integration.writes import write_events

# What `relay run` logs once a batch failed and is to be tried again: "batch aborted"
# before the fix (the abort timed out too, and only a warning said so), "batch in doubt"
# with it.
_BATCH_FAILED = re.compile(r"relay partition \d+: batch (aborted|in doubt)")


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A broker of the test's own (its bootstrap servers and work directory)."""
    workdir = tmp_path / "broker"
    try:
        yield start_broker(workdir), workdir
    finally:
        pid = devenv.kafka_pid(workdir)
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        devenv.stop_kafka(workdir, True)


@pytest.mark.long(60)
def test_a_commit_in_doubt_is_settled_and_the_partition_publishes_again(
    database_url: str, private_broker: tuple[str, Path], tmp_path: Path
) -> None:
    bootstrap, workdir = private_broker
    env = RelayTestEnv(database_url, bootstrap, new_prefix())
    migrate(database_url, RELAY_PARTITIONS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"{env.prefix}-events"
    admin.create_topics([NewTopic(topic, 3, replication_factor=1)])[topic].result(30)
    ids = write_events(database_url, topic, 200)

    paused = tmp_path / "paused-before-commit"
    log = tmp_path / "relay.log"
    service = start_relay(
        env,
        "run",
        # Pinned, outside the members group: this test is about the commit in doubt (a
        # group that loses and regains its member is test_shared_partitions' subject).
        "--partitions",
        ",".join(map(str, range(RELAY_PARTITIONS))),
        log=log,
        # The relay stops itself (SIGSTOP) once, with a batch sent and not yet committed.
        RELAY_FAILPOINTS=f"before_commit=stop,once={paused}",
        RELAY_KAFKA_TIMEOUT_S="5",
        RELAY_TRANSACTION_TIMEOUT_MS="15000",
        RELAY_KAFKA_PROPERTIES="socket.timeout.ms=10000",
    )
    broker = devenv.kafka_pid(workdir)
    assert broker is not None
    try:
        wait_until(lambda: paused.exists() and is_stopped(service.pid), 60, "the relay to pause")
        os.kill(broker, signal.SIGSTOP)  # the commit goes to a broker that does not answer
        os.kill(service.pid, signal.SIGCONT)
        wait_until(
            lambda: _BATCH_FAILED.search(log.read_text()) is not None,
            300,
            "the relay to give up on the commit",
        )
        os.kill(broker, signal.SIGCONT)

        ids |= write_events(database_url, topic, 100)
        wait_until(
            lambda: env.sql("SELECT count(*) FROM outbox") == [(0,)],
            30,
            "the relay to publish every row after the broker came back",
            explain=lambda: "relay log:\n" + log.read_text()[-20_000:],
        )
        assert service.poll() is None, log.read_text()
    finally:
        os.kill(broker, signal.SIGCONT)
        service.terminate()
        service.wait(60)
    assert_exactly_once_in_order(read_committed(bootstrap, topic), ids)
