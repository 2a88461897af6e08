"""Metrics and health: readiness, the HTTP server of /metrics, /healthz and /readyz, and
the observers the cores tell (driven here by the cores themselves, over the fakes)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest

from relay.errors import ConfigurationError, DatabaseError
from relay.mirroring.applier import Applier
from relay.mirroring.loop import MirrorLoop
from relay.publishing.partition_relay import PartitionRelay
from relay.replication.partition_replicator import PartitionReplicator
from relay.runtime.health import Readiness, State
from relay.runtime.metrics import (
    QUERY_EVERY_S,
    Backlog,
    MetricsServer,
    MirrorMetrics,
    OutboxMetrics,
    ProcessMetrics,
    ReplicaMetrics,
    serving,
)
from relay.runtime.retry import RetryPolicy
from relay.settings.relay import load_settings
from tests.fakes.mirroring import FakeStream, MemoryStore, items_table, logs_of
from tests.fakes.mirroring import record as kafka_record
from tests.fakes.publishing import OWNER, FakeClock, MemoryKafka, MemoryOutbox, MemoryTopic, record
from tests.fakes.replication import ORIGIN, ROUTE, MemorySource, MemoryTarget, source_log

P0 = ("t", 0)


def get(port: int, path: str) -> tuple[int, str, str]:
    """(status, content type, body) of GET ``path``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def sample(metrics: ProcessMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


# -- readiness ----------------------------------------------------------------------------


def test_ready_only_once_checked_and_every_component_runs() -> None:
    readiness = Readiness()
    assert readiness.check() == (False, "start-up checks have not passed yet")
    readiness.checked(["p0", "p1"])
    assert readiness.check() == (False, "p0 starting, p1 starting")
    readiness.set("p0", State.RUNNING)
    readiness.set("p1", State.RUNNING)
    assert readiness.check() == (True, "ready")
    readiness.set("p1", State.RETRYING)
    assert readiness.check() == (False, "p1 retrying")
    readiness.set("p1", State.RUNNING)
    readiness.set("p0", State.STOPPED)
    assert readiness.check() == (False, "p0 stopped")


def test_a_component_running_before_the_checks_passed_is_not_ready_yet() -> None:
    readiness = Readiness()
    readiness.set("p0", State.RUNNING)
    assert not readiness.check()[0]
    readiness.checked(["p0"])  # keeps the state it has
    assert readiness.check() == (True, "ready")


# -- the HTTP server ----------------------------------------------------------------------


def test_server_answers_healthz_readyz_and_metrics() -> None:
    metrics = OutboxMetrics()
    server = MetricsServer(metrics, "127.0.0.1", 0)
    try:
        assert get(server.port, "/healthz")[::2] == (200, "alive\n")
        status, _, body = get(server.port, "/readyz")
        assert (status, body) == (503, "start-up checks have not passed yet\n")
        metrics.expect([0], lambda positions: {})
        assert get(server.port, "/readyz")[::2] == (503, "relay partition 0 starting\n")
        metrics.running(0, 5)
        assert get(server.port, "/readyz")[::2] == (200, "ready\n")

        status, content_type, body = get(server.port, "/metrics")
        assert status == 200
        assert content_type.startswith("text/plain")
        assert "relay_ready 1.0" in body
        assert 'relay_outbox_position{partition="0"} 5.0' in body
        assert 'relay_outbox_records_published_total{partition="0"} 0.0' in body
        assert get(server.port, "/metrics?x=1")[0] == 200
        assert get(server.port, "/nothing")[0] == 404
    finally:
        server.close()
    with pytest.raises(urllib.error.URLError):
        get(server.port, "/healthz")


def test_a_port_in_use_is_a_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            MetricsServer(OutboxMetrics(), "127.0.0.1", port)


def test_serving_without_a_port_serves_nothing() -> None:
    with serving(OutboxMetrics(), "127.0.0.1", None):
        pass  # no server, no error


def test_processes_keep_registries_of_their_own() -> None:
    first, second = OutboxMetrics(), OutboxMetrics()
    first.transaction(0, committed=True)
    assert sample(first, "relay_outbox_transactions_committed_total", partition="0") == 1
    assert sample(second, "relay_outbox_transactions_committed_total", partition="0") is None
    MirrorMetrics()  # no clash with the default registry or the others


def test_settings_read_the_metrics_port_and_host() -> None:
    env = {"RELAY_DATABASE_URL": "postgresql://u:p@h/db", "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k:9092"}
    settings = load_settings(environ=env)
    assert (settings.metrics_port, settings.metrics_host) == (None, "0.0.0.0")
    assert settings.describe()["metrics"] == "off"
    settings = load_settings({"metrics_port": 9100}, environ={**env, "RELAY_METRICS_HOST": "::1"})
    assert (settings.metrics_port, settings.metrics_host) == (9100, "::1")
    assert settings.describe()["metrics"] == "::1:9100"
    with pytest.raises(ConfigurationError, match="RELAY_METRICS_PORT must be a TCP port"):
        load_settings(environ={**env, "RELAY_METRICS_PORT": "70000"})
    with pytest.raises(ConfigurationError, match="RELAY_METRICS_PORT must be positive"):
        load_settings(environ={**env, "RELAY_METRICS_PORT": "0"})


# -- the forward relay's observer -------------------------------------------------------


def relay_with(
    metrics: OutboxMetrics, outbox: MemoryOutbox, kafka: MemoryKafka, **kw: object
) -> PartitionRelay:
    return PartitionRelay(
        0,
        outbox,
        kafka.publisher(0),
        owner=OWNER,
        clock=FakeClock(),
        retry=RetryPolicy(initial_delay_s=0.01),
        observer=metrics,
        **kw,  # type: ignore[arg-type]
    )


def test_batches_transactions_and_positions_are_counted() -> None:
    metrics, outbox, kafka = OutboxMetrics(), MemoryOutbox(), MemoryKafka()
    outbox.add(*(record(0, s) for s in range(1, 8)))
    relay_with(metrics, outbox, kafka, batch_size=3).drain()
    assert sample(metrics, "relay_outbox_records_published_total", partition="0") == 7
    assert sample(metrics, "relay_outbox_transactions_committed_total", partition="0") == 3
    assert sample(metrics, "relay_outbox_batch_duration_seconds_count") == 3
    assert sample(metrics, "relay_outbox_position", partition="0") == 7
    assert (
        sample(metrics, "relay_outbox_transactions_aborted_total", partition="0") == 0
    )  # a 0 from the start


def test_each_published_event_is_timed_from_its_created_at_to_the_commit() -> None:
    metrics, outbox, kafka = OutboxMetrics(wall=lambda: 1000.0), MemoryOutbox(), MemoryKafka()
    times = {1: 999_950, 2: 998_000, 3: 0, 4: 1_000_200}  # 0: no time; 4: the writer's clock ahead
    outbox.add(*(replace(record(0, s), timestamp_ms=ms) for s, ms in times.items()))
    relay_with(metrics, outbox, kafka, batch_size=2).drain()
    name = "relay_outbox_publish_latency_seconds"
    assert sample(metrics, f"{name}_count") == 3
    assert sample(metrics, f"{name}_sum") == pytest.approx(0.05 + 2.0)
    assert sample(metrics, f"{name}_bucket", le="0.005") == 1  # the negative age: 0
    assert sample(metrics, f"{name}_bucket", le="0.05") == 2
    assert sample(metrics, f"{name}_bucket", le="1.0") == 2
    assert sample(metrics, f"{name}_bucket", le="2.5") == 3
    assert sample(metrics, f"{name}_bucket", le="+Inf") == 3


def test_a_keep_alive_is_a_transaction_without_records() -> None:
    metrics, outbox, kafka = OutboxMetrics(), MemoryOutbox(), MemoryKafka()
    outbox.add(record(0, 1))
    relay = relay_with(metrics, outbox, kafka)
    relay.drain()
    relay.keep_alive()
    assert sample(metrics, "relay_outbox_transactions_committed_total", partition="0") == 2
    assert sample(metrics, "relay_outbox_records_published_total", partition="0") == 1
    assert sample(metrics, "relay_outbox_batch_duration_seconds_count") == 1


def test_a_retried_batch_is_aborted_counted_and_not_ready_until_it_succeeds() -> None:
    metrics, outbox, kafka = OutboxMetrics(), MemoryOutbox(), MemoryKafka()
    metrics.expect([0], lambda positions: {})
    outbox.add(record(0, 1))
    relay = relay_with(metrics, outbox, kafka)
    relay.start()
    assert metrics.readiness.check() == (True, "ready")
    seen: list[tuple[bool, str]] = []
    kafka.fail_next_commits = 2
    original_wait = relay._clock.wait  # type: ignore[attr-defined]

    def wait(seconds: float, stop: object = None) -> bool:
        seen.append(metrics.readiness.check())  # as /readyz says it during the backoff
        return bool(original_wait(seconds, stop))

    relay._clock.wait = wait  # type: ignore[attr-defined]
    assert relay.publish_batch() is not None
    assert seen == [(False, "relay partition 0 retrying (broker hiccup)")] * 2  # names why
    assert metrics.readiness.check() == (True, "ready")
    assert sample(metrics, "relay_outbox_retries_total", partition="0") == 2
    assert sample(metrics, "relay_outbox_transactions_aborted_total", partition="0") == 2
    assert sample(metrics, "relay_outbox_transactions_committed_total", partition="0") == 1


def test_rows_kafka_refuses_are_counted_as_dead_letters() -> None:
    metrics, outbox = OutboxMetrics(), MemoryOutbox()
    kafka = MemoryKafka(topics={"t": MemoryTopic(compacted=True)})
    outbox.add(record(0, 1), record(0, 2, key=None), record(0, 3))  # type: ignore[arg-type]
    relay_with(metrics, outbox, kafka).drain()
    assert sample(metrics, "relay_outbox_dead_letters_total", partition="0") == 1
    assert sample(metrics, "relay_outbox_records_published_total", partition="0") == 2
    assert sample(metrics, "relay_outbox_transactions_aborted_total", partition="0") == 1


def test_a_fenced_or_stopped_partition_is_not_ready() -> None:
    metrics = OutboxMetrics()
    metrics.expect([0, 1], lambda positions: {})
    metrics.running(0, 1)
    metrics.running(1, 1)
    metrics.fenced(1)
    metrics.stopped(1)
    assert metrics.readiness.check() == (False, "relay partition 1 stopped")
    assert sample(metrics, "relay_outbox_fencings_total", partition="1") == 1
    assert sample(metrics, "relay_ready") == 0


def test_a_partition_handed_on_or_beyond_a_lowered_count_is_no_longer_exported() -> None:
    metrics = OutboxMetrics(clock=FakeClock())
    metrics.expect(
        [0, 1, 2], lambda positions: dict.fromkeys(positions, Backlog(3, 0)), shared=True
    )
    assert sample(metrics, "relay_outbox_records_published_total", partition="0") is None
    for partition in (0, 1, 2):
        metrics.running(partition, 17)
    assert sample(metrics, "relay_outbox_pending_rows", partition="1") == 3
    metrics.fenced(1)
    metrics.released(1)  # fenced, or revoked by the members group
    assert sample(metrics, "relay_outbox_pending_rows", partition="1") is None  # not asked again
    assert sample(metrics, "relay_outbox_position", partition="1") is None
    assert sample(metrics, "relay_outbox_records_published_total", partition="1") is None
    assert sample(metrics, "relay_outbox_fencings_total", partition="1") == 1  # it happened here
    assert sample(metrics, "relay_outbox_position", partition="0") == 17
    metrics.fenced(2)
    metrics.released(2)
    metrics.expect([0, 1], lambda positions: {}, shared=True)  # the count lowered to 2
    assert sample(metrics, "relay_outbox_position", partition="2") is None
    assert sample(metrics, "relay_outbox_fencings_total", partition="2") is None  # gone
    assert sample(metrics, "relay_outbox_fencings_total", partition="1") == 1
    assert sample(metrics, "relay_outbox_retries_total", partition="2") is None
    assert sample(metrics, "relay_outbox_position", partition="0") is None  # taken again, or not
    metrics.running(1, 422)
    assert sample(metrics, "relay_outbox_position", partition="1") == 422
    assert sample(metrics, "relay_outbox_records_published_total", partition="1") == 0


def test_the_backlog_is_asked_at_most_every_ten_seconds_and_at_once_about_new_partitions() -> None:
    clock = FakeClock()
    metrics = OutboxMetrics(clock=clock)
    asked: list[dict[int, int]] = []

    def backlog(positions: Mapping[int, int]) -> dict[int, Backlog]:
        asked.append(dict(positions))
        return {
            p: Backlog(pending=10 - position, dead_letters=1, oldest_pending_age_s=position / 2)
            for p, position in positions.items()
        }

    metrics.expect([0, 1], backlog)
    assert sample(metrics, "relay_outbox_pending_rows", partition="0") is None  # no position yet
    assert asked == []
    metrics.running(0, 4)
    assert sample(metrics, "relay_outbox_pending_rows", partition="0") == 6
    assert sample(metrics, "relay_outbox_dead_letter_rows", partition="0") == 1
    assert sample(metrics, "relay_outbox_oldest_pending_age_seconds", partition="0") == 2
    metrics.running(0, 9)
    clock.now += QUERY_EVERY_S - 1
    assert sample(metrics, "relay_outbox_pending_rows", partition="0") == 6  # the last answer
    metrics.running(1, 7)  # a partition it was not asked about: at once
    assert sample(metrics, "relay_outbox_pending_rows", partition="1") == 3
    assert sample(metrics, "relay_outbox_pending_rows", partition="0") == 1
    clock.now += QUERY_EVERY_S
    sample(metrics, "relay_outbox_pending_rows", partition="0")
    assert asked == [{0: 4}, {0: 9, 1: 7}, {0: 9, 1: 7}]


def test_a_failing_backlog_query_leaves_the_series_out(caplog: pytest.LogCaptureFixture) -> None:
    metrics = OutboxMetrics(clock=FakeClock())

    def backlog(positions: Mapping[int, int]) -> dict[int, Backlog]:
        raise DatabaseError("connection refused")

    metrics.expect([0], backlog)
    metrics.running(0, 1)
    assert sample(metrics, "relay_outbox_pending_rows", partition="0") is None
    assert "reading the pending rows failed: connection refused" in caplog.text


# -- the mirror loop's observer -----------------------------------------------------------


def mirror_loop(
    metrics: MirrorMetrics, store: MemoryStore, targets: dict[tuple[str, int], int]
) -> MirrorLoop:
    return MirrorLoop(
        Applier([items_table()], store),
        store,
        batch_size=2,
        targets=targets,
        retry=RetryPolicy(initial_delay_s=0.01),
        clock=FakeClock(),
        observer=metrics,
    )


def test_mirror_counts_applied_records_dead_letters_and_lag() -> None:
    records = [kafka_record(0, 1, "a"), kafka_record(1, None, "no key"), kafka_record(2, 2, "b")]
    stream = FakeStream(logs_of(records), stable={P0: 4})
    asked: list[Sequence[tuple[str, int]]] = []

    def stable(partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        asked.append(partitions)
        return stream.last_stable_offsets(partitions)

    clock = FakeClock()
    metrics, store = MirrorMetrics(clock=clock), MemoryStore()
    loop = mirror_loop(metrics, store, dict(stream.stable))
    stream.assign([P0], loop)
    metrics.started(stable)
    assert sample(metrics, "relay_mirror_lag_records", topic="t", partition="0") == 4
    loop.run(stream)
    assert sample(metrics, "relay_mirror_records_applied_total", topic="t", partition="0") == 2
    assert sample(metrics, "relay_mirror_dead_letters_total", topic="t", partition="0") == 1
    assert sample(metrics, "relay_mirror_lag_records", topic="t", partition="0") == 0
    assert asked == [[P0]]  # the stored offsets are the loop's; the stable ones asked once
    stream.revoke([P0])  # another member of the group applies it now: its series go
    assert sample(metrics, "relay_mirror_lag_records", topic="t", partition="0") is None
    assert sample(metrics, "relay_mirror_records_applied_total", topic="t", partition="0") is None
    assert sample(metrics, "relay_mirror_dead_letters_total", topic="t", partition="0") is None
    metrics.stopped()
    assert metrics.readiness.check() == (False, "mirror consumer stopped")


def test_mirror_times_each_record_and_tells_its_lag_in_seconds() -> None:
    made = [kafka_record(0, 1, "a"), kafka_record(1, 2, "b"), kafka_record(2, 3, "c")]
    stamps = (940.0, 990.0, None)  # seconds since the epoch; None: no timestamp
    records = [
        replace(r, timestamp_ms=None if at is None else round(at * 1000))
        for r, at in zip(made, stamps, strict=True)
    ]
    stream = FakeStream(logs_of(records), stable={P0: 3})
    asked: list[dict[tuple[str, int], int | None]] = []

    def record_times(starts: Mapping[tuple[str, int], int | None]) -> dict[tuple[str, int], int]:
        asked.append(dict(starts))
        return {tp: records[offset or 0].timestamp_ms or 0 for tp, offset in starts.items()}

    clock = FakeClock()
    metrics, store = MirrorMetrics(clock=clock, wall=lambda: 1000.0), MemoryStore()
    loop = mirror_loop(metrics, store, dict(stream.stable))
    stream.assign([P0], loop)
    metrics.started(stream.last_stable_offsets, record_times)
    assert sample(metrics, "relay_mirror_lag_seconds", topic="t", partition="0") == 60
    assert asked == [{P0: None}]  # nothing stored: from the beginning
    loop.run(stream)
    name = "relay_mirror_apply_latency_seconds"
    assert sample(metrics, f"{name}_count") == 2  # the record without a time is left out
    assert sample(metrics, f"{name}_sum") == 60 + 10
    assert sample(metrics, f"{name}_bucket", le="10.0") == 1
    assert sample(metrics, "relay_mirror_lag_seconds", topic="t", partition="0") == 0  # caught up
    assert len(asked) == 1  # not asked about a partition that does not lag
    metrics.stopped()


def test_mirror_is_not_ready_while_it_retries() -> None:
    stream = FakeStream(logs_of([kafka_record(0, 1, "a")]), stable={P0: 1})
    metrics, store = MirrorMetrics(), MemoryStore(fail_next=1)
    loop = mirror_loop(metrics, store, dict(stream.stable))
    stream.assign([P0], loop)
    metrics.started(None)
    seen: list[tuple[bool, str]] = []
    store.before_apply = lambda batch: seen.append(metrics.readiness.check())
    loop.run(stream)
    assert seen == [(True, "ready"), (False, "mirror consumer retrying")]
    assert metrics.readiness.check() == (True, "ready")
    assert sample(metrics, "relay_mirror_retries_total") == 1
    assert sample(metrics, "relay_mirror_lag_records", topic="t", partition="0") is None  # no query


def test_mirror_reports_each_tables_complete_through_time() -> None:
    metrics = MirrorMetrics()
    metrics.started(None)
    assert sample(metrics, "relay_mirror_complete_through_timestamp_seconds", table="t") is None
    metrics.freshness(lambda _: {"t": 1_790_000_000.5})  # a table not known is left out
    assert (
        sample(metrics, "relay_mirror_complete_through_timestamp_seconds", table="t")
        == 1_790_000_000.5
    )
    metrics.stopped()
    assert sample(metrics, "relay_mirror_complete_through_timestamp_seconds", table="t") is None


# -- the replicator's observer ------------------------------------------------------------


def test_each_copied_record_is_timed_from_its_source_timestamp_as_mirrormaker_does() -> None:
    clock = FakeClock()
    metrics = ReplicaMetrics(clock=clock, wall=lambda: 3.0)  # 3 s after the epoch
    source = MemorySource(source_log(b"a", None, b"b", b"c"))  # stamped 1000 + offset ms
    PartitionReplicator(
        ROUTE,
        source.reader(),
        MemoryTarget().writer(),
        origin=ORIGIN,
        clock=clock,
        observer=metrics,
    ).drain(4)
    latency, age = "relay_replicate_latency_seconds", "relay_replicate_record_age_seconds"
    assert sample(metrics, f"{latency}_count") == 3  # the records copied: not the marker
    assert sample(metrics, f"{latency}_sum") == pytest.approx(2.0 + 1.998 + 1.997)
    assert sample(metrics, f"{latency}_bucket", le="1.0") == 0
    assert sample(metrics, f"{latency}_bucket", le="2.5") == 3
    # The age when read: the batch's time from its read to its commit earlier (0 s here).
    assert sample(metrics, f"{age}_count") == 3
    assert sample(metrics, f"{age}_sum") == sample(metrics, f"{latency}_sum")


def test_replicate_tells_each_synced_groups_age_offsets_and_skipped_rounds() -> None:
    now = [1000.0]
    metrics = ReplicaMetrics(wall=lambda: now[0])
    metrics.syncing(["billing", "audit"])
    now[0] = 1007.0
    metrics.group_sync_began("billing")
    metrics.group_synced("billing", 3)
    metrics.group_sync_skipped("audit")
    now[0] = 1010.0
    value = metrics.registry.get_sample_value
    # Since its last round; a group not synced yet counts from the start.
    assert value("relay_replicate_group_sync_age_seconds", {"group": "billing"}) == 3.0
    assert value("relay_replicate_group_sync_age_seconds", {"group": "audit"}) == 10.0
    assert value("relay_replicate_group_offsets_synced_total", {"group": "billing"}) == 3.0
    assert value("relay_replicate_group_offsets_synced_total", {"group": "audit"}) == 0.0
    assert value("relay_replicate_group_sync_skipped_total", {"group": "audit"}) == 1.0
