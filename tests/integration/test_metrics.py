"""`relay run` and `relay mirror` with ``--metrics-port``: Prometheus /metrics, /healthz and
/readyz, against the real servers."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

import relay
from relay.devenv.databases import libpq_url
from relay.devenv.ports import free_ports
from tests.integration.mirror_support import (
    TxProducer,
    item,
    items_mapping,
    last_stable_offsets,
    mirror_env,
    records_of,
)
from tests.integration.support import RelayTestEnv, run_relay, start_relay, wait_until
from tests.integration.test_shared_partitions import drained, holdings
from tests.integration.writes import publish_events

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET ``path``; (0, reason) while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, ConnectionError) as exc:
        return 0, str(exc)


def scrape(port: int) -> Samples:
    status, body = get(port, "/metrics")
    assert status == 200, body
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: v for (n, labels), v in samples.items() if n == name}


def test_relay_run_serves_metrics_health_and_readiness(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    (port,) = free_ports(1)
    log = tmp_path / "relay.log"
    service = start_relay(relay_env, "run", "--metrics-port", str(port), log=log)
    try:
        wait_until(lambda: get(port, "/healthz") == (200, "alive\n"), 60, "/healthz")
        wait_until(lambda: get(port, "/readyz") == (200, "ready\n"), 60, "/readyz")
        events = [relay.Event(topic, f"k{n % 9}", {"n": n}) for n in range(300)]
        publish_events(relay_env.database_url, events)

        def published() -> float:
            return total(scrape(port), "relay_outbox_records_published_total")

        wait_until(lambda: published() == 300, 60, "300 records published")
        wait_until(
            lambda: (
                by_label(scrape(port), "relay_outbox_pending_rows", "partition")
                == {"0": 0, "1": 0, "2": 0, "3": 0}
            ),
            30,
            "no rows pending (asked at most every 10 s)",
        )
        samples = scrape(port)
        assert by_label(samples, "relay_outbox_oldest_pending_age_seconds", "partition") == (
            dict.fromkeys("0123", 0)
        )
        # Every event timed from its created_at (the Kafka timestamp) to its commit.
        assert samples[("relay_outbox_publish_latency_seconds_count", ())] == 300
        latencies = samples[("relay_outbox_publish_latency_seconds_sum", ())]
        assert 0 < latencies < 300 * 60
        assert total(samples, "relay_outbox_transactions_committed_total") >= 1
        assert total(samples, "relay_outbox_batch_duration_seconds_count") >= 1
        for name in (
            "relay_outbox_transactions_aborted_total",
            "relay_outbox_fencings_total",
            "relay_outbox_dead_letters_total",
            "relay_outbox_dead_letter_rows",
        ):
            assert by_label(samples, name, "partition") == dict.fromkeys("0123", 0), name
        positions = by_label(samples, "relay_outbox_position", "partition")
        assert sorted(positions) == ["0", "1", "2", "3"]
        assert sum(1 for p in positions.values() if p > 0) >= 2  # 9 keys over 4 partitions
        assert samples[("relay_ready", ())] == 1
    finally:
        service.terminate()
        service.wait(60)
    assert service.returncode == 0, log.read_text()


def test_relay_run_is_not_ready_while_a_partition_retries(
    relay_env: RelayTestEnv, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    topic = f"metrics-later-{relay_env.prefix}"
    publish_events(
        relay_env.database_url, [relay.Event(topic, f"k{n}", {"n": n}) for n in range(20)]
    )
    (port,) = free_ports(1)
    log = tmp_path / "relay.log"
    service = start_relay(
        relay_env, "run", "--metrics-port", str(port), log=log, RELAY_MISSING_TOPIC_WAIT_S="600"
    )
    try:
        wait_until(
            lambda: (
                get(port, "/readyz")[0] == 503
                and "retrying" in get(port, "/readyz")[1]
                and f"topic '{topic}' does not exist" in get(port, "/readyz")[1]  # the reason
                and total(scrape(port), "relay_outbox_retries_total") > 0
            ),
            60,
            "the missing topic to hold a partition in its retry loop",
        )
        assert get(port, "/healthz")[0] == 200  # alive all the same
        assert total(scrape(port), "relay_outbox_transactions_aborted_total") > 0
        assert scrape(port)[("relay_ready", ())] == 0
        wait_until(
            lambda: (
                max(
                    by_label(
                        scrape(port), "relay_outbox_oldest_pending_age_seconds", "partition"
                    ).values(),
                    default=0,
                )
                > 0
            ),
            30,
            "the rows held up by the missing topic to age (asked at most every 10 s)",
        )
        kafka_admin.create_topics([NewTopic(topic, 3, replication_factor=-1)])[topic].result(30)
        wait_until(
            lambda: total(scrape(port), "relay_outbox_records_published_total") == 20,
            90,
            "the relay to publish once the topic exists",
        )
        wait_until(lambda: get(port, "/readyz")[0] == 200, 30, "/readyz to recover")
    finally:
        service.terminate()
        service.wait(60)
        kafka_admin.delete_topics([topic])
    assert service.returncode == 0, log.read_text()


def test_relay_mirror_serves_applied_records_and_lag(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("mirror-metrics", partitions=2)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    history = [(n % 40, {"name": f"n{n}", "qty": n}) for n in range(150)]
    TxProducer(bootstrap_servers).in_transactions(topic, records_of(history), size=30)
    stable = last_stable_offsets(bootstrap_servers, topic)  # all there before the mirror starts

    (port,) = free_ports(1)
    log = tmp_path / "mirror.log"
    service = env.start(log, "--metrics-port", str(port), RELAY_METRICS_HOST="127.0.0.1")
    try:
        wait_until(lambda: get(port, "/healthz") == (200, "alive\n"), 60, "/healthz")
        wait_until(lambda: get(port, "/readyz") == (200, "ready\n"), 60, "/readyz")
        wait_until(
            lambda: total(scrape(port), "relay_mirror_records_applied_total") == 150,
            60,
            "150 records applied",
        )
        wait_until(
            lambda: (
                by_label(scrape(port), "relay_mirror_lag_records", "partition") == {"0": 0, "1": 0}
            ),
            60,
            "no lag in either partition",
        )
        assert env.offsets() == stable  # lag 0: the stored offsets are the last stable ones
        samples = scrape(port)
        assert by_label(samples, "relay_mirror_lag_seconds", "partition") == {"0": 0, "1": 0}
        # Every record timed from its Kafka timestamp to the commit that applied it.
        assert samples[("relay_mirror_apply_latency_seconds_count", ())] == 150
        assert 0 < samples[("relay_mirror_apply_latency_seconds_sum", ())] < 150 * 60
        assert total(samples, "relay_mirror_dead_letters_total") == 0
        assert samples[("relay_mirror_retries_total", ())] == 0
        assert samples[("relay_ready", ())] == 1

        # A record stamped an hour ago that the mirror cannot apply yet (the table is
        # locked): its partition lags by an hour, read from Kafka at scrape time.
        with psycopg.connect(libpq_url(database_url)) as locked:
            locked.execute("LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
            an_hour_ago = int((time.time() - 3600) * 1000)
            TxProducer(bootstrap_servers).transaction(
                topic, [item(7, "late", 7)], partition=1, timestamp_ms=an_hour_ago
            )

            def lag_s() -> dict[str, float]:
                return by_label(scrape(port), "relay_mirror_lag_seconds", "partition")

            wait_until(
                lambda: lag_s().get("1", 0) >= 3600 and lag_s().get("0") == 0,
                60,
                "partition 1 an hour behind (stable offsets asked at most every 10 s)",
                lambda: str(lag_s()),
            )
            assert lag_s()["1"] < 3600 + 300
        wait_until(lambda: lag_s() == {"0": 0, "1": 0}, 60, "caught up again", lambda: str(lag_s()))
    finally:
        service.terminate()
        service.wait(60)
    assert service.returncode == 0, log.read_text()


def _partitions_exported(port: int) -> dict[str, set[str]] | None:
    """Per partition-labelled relay series name, the relay partitions it is exported for
    (None while the process does not serve yet)."""
    if get(port, "/healthz")[0] != 200:
        return None
    found: dict[str, set[str]] = {}
    for (name, labels), _ in scrape(port).items():
        if name.startswith("relay_outbox_") and "partition" in dict(labels):
            found.setdefault(name, set()).add(dict(labels)["partition"])
    return found


def _exports_only(port: int, held: set[int]) -> bool:
    exported = _partitions_exported(port)
    if exported is None:
        return False
    expected = {str(p) for p in held}
    # Every series, relay_outbox_fencings_total too: a member handing a partition on is
    # not fenced (one fenced out of it keeps that count while the partition exists).
    return all(found == expected for found in exported.values()) and (
        not held or "relay_outbox_position" in exported
    )


@pytest.mark.long(40)
def test_a_relay_stops_exporting_the_partitions_it_no_longer_holds(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """Handed over to another member, or gone when the count is lowered: a process's
    series of a partition go with it (no position of 17 while the real one is 422)."""
    ports = free_ports(2)
    logs = [tmp_path / "relay-a.log", tmp_path / "relay-b.log"]

    def explain() -> str:
        shown = [f"--- {log.name}\n{log.read_text()[-4000:]}" for log in logs if log.exists()]
        return "\n".join(shown + [f"--- :{p} {_partitions_exported(p)}" for p in ports])

    def member(port: int, log: Path) -> subprocess.Popen[str]:
        return start_relay(
            relay_env,
            "run",
            "--metrics-port",
            str(port),
            log=log,
            RELAY_MEMBER_SESSION_TIMEOUT_MS="6000",
        )

    members = [member(ports[0], logs[0])]
    try:
        publish_events(
            relay_env.database_url, [relay.Event(topic, f"k{n}", {"n": n}) for n in range(40)]
        )
        wait_until(
            lambda: _exports_only(ports[0], {0, 1, 2, 3}), 60, "all four partitions", explain
        )
        wait_until(lambda: drained(relay_env), 60, "the rows to be published", explain)
        lowered = run_relay(relay_env, "db", "partitions", "2")
        assert lowered.returncode == 0, lowered.stderr
        wait_until(
            lambda: _exports_only(ports[0], {0, 1}),
            60,
            "the series of partitions 2 and 3 to go once the count is 2",
            explain,
        )
        members.append(member(ports[1], logs[1]))

        def shared() -> bool:
            held = [holdings(log) for log in logs]
            return bool(held[1]) and not held[0] & held[1] and held[0] | held[1] == {0, 1}

        wait_until(shared, 90, "the second member to take a partition over", explain)
        wait_until(
            lambda: all(
                _exports_only(p, holdings(log)) for p, log in zip(ports, logs, strict=True)
            ),
            30,
            "each member to export the partitions it holds, and only those",
            explain,
        )
    finally:
        for process in members:
            process.terminate()
        for process in members:
            process.wait(60)
    assert [p.returncode for p in members] == [0, 0], explain()
