"""`relay replicate --sync-groups`: while the replicator runs, each named consumer group's
committed source offsets are translated and committed for it on the target, so that a
failover after the source cluster is gone resumes the group at the first record it had
not processed; never while the group consumes on the target (docs/replication.md)."""

from __future__ import annotations

import shutil
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from relay import devenv
from relay.devenv.ports import free_ports
from relay.devenv.private import start_broker
from tests.integration.replicate_support import (
    ReplicaEnv,
    Replicated,
    committed,
    consume_and_commit,
    group_consumer,
    new_group,
    read_log,
    resume_on_target,
    write_with_aborts,
)
from tests.integration.support import wait_until
from tests.integration.test_metrics import by_label, get, scrape

pytestmark = pytest.mark.integration

PREFIX = "dr."


def first_copy_from(copies: list[Replicated], source_offset: int) -> int:
    """The target offset of the first copy of a record at ``source_offset`` or later."""
    return next(c.offset for c in copies if c.source_offset() >= source_offset)


@pytest.fixture
def private_clusters(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """A source and a target cluster of the test's own (one broker each), so that the
    source can be stopped: (source, target, the source broker's work directory)."""
    dirs = [tmp_path / "source-broker", tmp_path / "target-broker"]
    try:
        yield start_broker(dirs[0]), start_broker(dirs[1]), dirs[0]
    finally:
        for wd in dirs:
            devenv.stop_kafka(wd, True)
            shutil.rmtree(wd, ignore_errors=True)


@pytest.mark.long(120)
def test_after_the_source_is_gone_a_synced_group_resumes_at_its_first_unprocessed_record(
    private_clusters: tuple[str, str, Path], tmp_path: Path
) -> None:
    source, target, source_dir = private_clusters
    topic, app = f"it-sync-{uuid.uuid4().hex[:8]}", f"it-sync-app-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": source})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    write_with_aborts(source, topic, (0, 1), transactions=9, per_partition=6)
    originals = read_log(source, topic, 2)
    replica = ReplicaEnv(source, target, new_group())
    log = tmp_path / "replicate.log"
    args = ("--topics", topic, "--target-prefix", PREFIX, "--sync-groups", app)
    process = replica.start(*args, "--sync-interval", "0.5", log=log)
    target_topic = PREFIX + topic
    try:
        # The group processes part of each partition on the source (partition 1: committed
        # past a transaction's marker, as a Java consumer does), then more of partition 0:
        # the offsets on the target follow.
        for cuts in ({0: 10, 1: 18}, {0: 20, 1: 18}):
            commit = {0: originals[0][cuts[0] - 1].offset + 1, 1: originals[1][cuts[1]].offset}
            consume_and_commit(source, app, topic, cuts, commit)

            def synced(commit: dict[int, int] = commit) -> dict[int, int] | None:
                copies = read_log(target, target_topic, 2)
                if sum(map(len, copies.values())) < sum(map(len, originals.values())):
                    return None  # not all copied yet
                return {p: first_copy_from(copies[p], commit[p]) for p in (0, 1)}

            wait_until(
                lambda: committed(target, app, target_topic, 2) == synced(),
                60,
                f"the group's offsets {commit} synced to the target",
                lambda: f"{committed(target, app, target_topic, 2)}\n{log.read_text()}",
                interval=0.5,
            )

        devenv.stop_kafka(source_dir, True)  # the source cluster is gone

        resumed = resume_on_target(target, app, target_topic, 2)
        for p, records in originals.items():
            unprocessed = records[cuts[p] :]
            assert [r.source_offset() for r in resumed[p]] == [r.offset for r in unprocessed]
            assert [r.value for r in resumed[p]] == [r.value for r in unprocessed]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(90)


@pytest.mark.long(50)
def test_a_group_consuming_on_the_target_is_left_alone_until_it_stops(
    replica: ReplicaEnv,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic, app = make_topic("sync-active", partitions=1), f"it-sync-app-{uuid.uuid4().hex[:8]}"
    write_with_aborts(replica.source, topic, (0,), transactions=4, per_partition=5)
    args = ("--topics", topic, "--target-prefix", PREFIX)
    assert replica.run("--once", *args).returncode == 0
    target_topic = PREFIX + topic
    consume_and_commit(replica.source, app, topic, {0: 5}, {0: 5})
    # The group runs on the target already (say, a failover drill).
    active: Consumer | None = group_consumer(replica.target, app, {"auto.offset.reset": "earliest"})
    assert active is not None
    active.subscribe([target_topic])
    wait_until(lambda: (active.poll(0.2), active.assignment())[1] != [], 60, "an assignment")
    (port,) = free_ports(1)
    log = tmp_path / "replicate.log"
    process = replica.start(
        *args, "--sync-groups", app, "--sync-interval", "0.2", "--metrics-port", str(port), log=log
    )
    try:
        wait_until(lambda: get(port, "/readyz")[0] == 200, 60, "/readyz", log.read_text)

        def skipped() -> float:
            found = by_label(scrape(port), "relay_replicate_group_sync_skipped_total", "group")
            return found.get(app, 0.0)

        wait_until(lambda: skipped() >= 3, 60, "rounds skipped", log.read_text)
        assert committed(replica.target, app, target_topic, 1) == {}  # left alone
        text = log.read_text()
        assert text.count(f"group {app} has 1 active member(s) on the target cluster") == 1

        active.close()  # it stops consuming there: synced from now on
        active = None
        copies = read_log(replica.target, target_topic, 1)[0]
        wait_until(
            lambda: (
                committed(replica.target, app, target_topic, 1) == {0: first_copy_from(copies, 5)}
            ),
            60,
            "the group's offset synced once it stopped",
            log.read_text,
        )
        assert f"group {app}: its offsets are synced to the target cluster again" in (
            log.read_text()
        )
    finally:
        if active is not None:
            active.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()


@pytest.mark.long(50)
def test_once_syncs_at_its_end_and_moves_back_only_when_the_group_went_back_on_the_source(
    replica: ReplicaEnv, make_topic: Callable[..., str]
) -> None:
    topic, app = make_topic("sync-back", partitions=1), f"it-sync-app-{uuid.uuid4().hex[:8]}"
    write_with_aborts(replica.source, topic, (0,), transactions=6, per_partition=5)
    originals = read_log(replica.source, topic, 1)[0]
    args = ("--once", "--topics", topic, "--target-prefix", PREFIX, "--sync-groups", app)
    target_topic = PREFIX + topic

    def sync_at(source_offset: int) -> dict[int, int]:
        """Where the group is on the target after it committed ``source_offset`` on the
        source and `relay replicate --once --sync-groups` ran."""
        consume_and_commit(replica.source, app, topic, {0: 0}, {0: source_offset})
        done = replica.run(*args)
        assert done.returncode == 0, done.stderr
        return committed(replica.target, app, target_topic, 1)

    assert sync_at(0) == {0: 0}  # copies everything first, then syncs
    copies = read_log(replica.target, target_topic, 1)[0]
    at = {n: first_copy_from(copies, originals[n].offset) for n in (3, 15)}
    assert sync_at(originals[15].offset) == {0: at[15]}
    # Reset back on the source (to process records again): the target follows back.
    assert sync_at(originals[3].offset) == {0: at[3]}
    # Its consumers moved to the target and committed further there: a stale source
    # offset never takes them back.
    consume_and_commit(replica.target, app, target_topic, {0: 0}, {0: at[15]})
    assert sync_at(originals[3].offset) == {0: at[15]}
