"""The local development servers: idempotent ``up`` and real PostgreSQL/Kafka connectivity,
including the second, independent Kafka cluster."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from relay import devenv
from relay.devenv import Endpoints, SaslEndpoint, kafka_files


@pytest.fixture
def local_workdir(devenv_workdir: Path | None, endpoints: Endpoints) -> Path:
    if devenv_workdir is None:
        pytest.skip("running against external servers (RELAY_TEST_* set)")
    return devenv_workdir


def test_up_is_idempotent(local_workdir: Path, endpoints: Endpoints) -> None:
    pg_pid = devenv.postgres_pid(local_workdir)
    kafka_pid = devenv.kafka_pid(local_workdir)
    target_pid = devenv.target_kafka_pid(local_workdir)
    assert pg_pid is not None
    assert kafka_pid is not None
    assert target_pid is not None

    started = time.monotonic()
    again = devenv.up(local_workdir)
    elapsed = time.monotonic() - started

    assert again == endpoints
    assert elapsed < 10, f"a warm up() took {elapsed:.1f}s"
    assert devenv.postgres_pid(local_workdir) == pg_pid
    assert devenv.kafka_pid(local_workdir) == kafka_pid
    assert devenv.target_kafka_pid(local_workdir) == target_pid
    st = devenv.status(local_workdir)
    assert st.up
    assert (st.postgres.pid, st.kafka.pid, st.target_kafka.pid) == (pg_pid, kafka_pid, target_pid)
    assert st.endpoints == endpoints
    env_text = devenv.env_file(local_workdir).read_text()
    assert f"RELAY_DATABASE_URL='{endpoints.database_url}'" in env_text
    assert f"RELAY_KAFKA_BOOTSTRAP_SERVERS='{endpoints.bootstrap_servers}'" in env_text
    sasl = endpoints.sasl
    assert sasl is not None
    assert f"RELAY_DEV_SASL_BOOTSTRAP_SERVERS='{sasl.bootstrap_servers}'" in env_text
    assert f"RELAY_DEV_SASL_USERNAME='{sasl.username}'" in env_text
    assert f"RELAY_DEV_SASL_PASSWORD='{sasl.password}'" in env_text
    target = endpoints.target_bootstrap_servers
    assert target is not None
    assert f"RELAY_DEV_TARGET_KAFKA_BOOTSTRAP_SERVERS='{target}'" in env_text
    assert f"RELAY_DEV_TARGET_KAFKA_BOOTSTRAP_SERVERS={target}" in devenv.describe(st)


def test_printed_settings_mask_the_password(endpoints: Endpoints) -> None:
    shown = devenv.describe(endpoints)
    assert "RELAY_KAFKA_BOOTSTRAP_SERVERS=" in shown
    assert ":***@" in shown
    assert "relay:relay@" not in shown
    if endpoints.sasl is not None:
        assert f"RELAY_DEV_SASL_BOOTSTRAP_SERVERS={endpoints.sasl.bootstrap_servers}" in shown
        assert "RELAY_DEV_SASL_PASSWORD=***" in shown
        assert endpoints.sasl.password not in shown
        assert endpoints.sasl.password not in repr(endpoints)


def test_sasl_listener_logs_relay_in(sasl_endpoint: SaslEndpoint) -> None:
    admin = AdminClient(sasl_endpoint.client_config())
    assert admin.list_topics(timeout=15).brokers


def test_sasl_port_is_configurable_and_distinct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_DEV_KAFKA_SASL_PORT", "60123")
    assert devenv.configured_ports().kafka_sasl == 60123
    monkeypatch.setenv("RELAY_DEV_KAFKA_SASL_PORT", str(devenv.configured_ports().kafka))
    with pytest.raises(devenv.DevEnvError, match="6 distinct ports"):
        devenv.configured_ports()


def test_second_cluster_ports_are_configurable_and_distinct(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RELAY_DEV_TARGET_KAFKA_PORT", "60124")
    monkeypatch.setenv("RELAY_DEV_TARGET_KAFKA_CONTROLLER_PORT", "60125")
    broker = devenv.configured_ports().target_broker()
    assert (broker.kafka, broker.kafka_controller, broker.kafka_sasl) == (60124, 60125, None)
    monkeypatch.setenv("RELAY_DEV_TARGET_KAFKA_PORT", str(devenv.configured_ports().kafka))
    with pytest.raises(devenv.DevEnvError, match="6 distinct ports"):
        devenv.configured_ports()
    monkeypatch.setenv("RELAY_DEV_TARGET_KAFKA_CONTROLLER_PORT", "not-a-port")
    with pytest.raises(devenv.DevEnvError, match="RELAY_DEV_TARGET_KAFKA_CONTROLLER_PORT"):
        devenv.configured_ports()


def test_second_cluster_broker_has_no_sasl_listener(tmp_path: Path) -> None:
    ports = devenv.Ports(postgres=1, kafka=2, kafka_controller=3, kafka_sasl=4)
    broker = ports.target_broker()
    (tmp_path / "kafka").mkdir()
    text = kafka_files.write_properties(tmp_path, broker).read_text()
    assert "listeners=PLAINTEXT://127.0.0.1:59192,CONTROLLER://127.0.0.1:59193\n" in text
    assert "SASL_PLAINTEXT://" not in text
    assert "sasl.jaas.config" not in text
    assert "transaction.state.log.replication.factor=1\n" in text
    assert kafka_files.sasl_port(tmp_path) is None
    assert kafka_files.properties_current(tmp_path, broker)
    assert not kafka_files.properties_current(tmp_path, ports)


def test_outdated_broker_configuration_is_detected(tmp_path: Path) -> None:
    """A broker whose server.properties predates the SASL listener is restarted by ``up``
    (start_kafka compares the file with what it would write now)."""
    ports = devenv.Ports(postgres=1, kafka=2, kafka_controller=3, kafka_sasl=4)
    (tmp_path / "kafka").mkdir()
    props = kafka_files.write_properties(tmp_path, ports)
    assert props.stat().st_mode & 0o077 == 0  # it holds the SASL passwords
    assert kafka_files.properties_current(tmp_path, ports)
    assert kafka_files.sasl_port(tmp_path) == 4
    assert 'user_relay="relay-dev-secret"' in props.read_text()
    old = [
        line.replace(",SASL_PLAINTEXT://127.0.0.1:4", "")
        for line in props.read_text().splitlines()
        if not line.startswith("listener.name.")
    ]
    props.write_text("\n".join(old) + "\n")
    assert not kafka_files.properties_current(tmp_path, ports)
    assert kafka_files.sasl_port(tmp_path) is None
    assert not kafka_files.properties_current(tmp_path / "missing", ports)


def test_cluster_ids_never_look_like_options() -> None:
    assert not any(kafka_files.new_cluster_id().startswith("-") for _ in range(2000))


def test_storage_formats_with_a_cluster_id_that_starts_with_a_dash(
    local_workdir: Path, tmp_path: Path
) -> None:
    """A random base64 id starts with ``-`` one time in 64; the StorageTool call must still
    read it as the id, not as an option."""
    (tmp_path / "kafka").mkdir()
    kafka_files.libs_dir(tmp_path).symlink_to(kafka_files.libs_dir(local_workdir))
    ports = devenv.Ports(postgres=1, kafka=2, kafka_controller=3, kafka_sasl=4)
    props = kafka_files.write_properties(tmp_path, ports)
    cluster_id = "-0nV_g71SxCBsjcrQw56lw"

    kafka_files.format_storage(tmp_path, props, timeout=120, cluster_id=cluster_id)

    meta = (kafka_files.kafka_dir(tmp_path) / "data" / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}" in meta


def test_postgres_accepts_connections(database_url: str) -> None:
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
            assert conn.execute(text("SELECT current_database()")).scalar_one().startswith("test_")
            conn.execute(text("CREATE TABLE t (id bigint PRIMARY KEY)"))
            conn.execute(text("INSERT INTO t VALUES (1), (2)"))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM t")).scalar_one() == 2
    finally:
        engine.dispose()


def _consume_all(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-devenv-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if len(values) >= expected:
                    break
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                continue
            value = msg.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


def _check_transactions(bootstrap: str, topic: str) -> None:
    """A transactional producer commits, aborts and commits; read_committed sees the two
    committed values only, read_uncommitted all three."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"test-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    for value, commit in ((b"one", True), (b"aborted", False), (b"two", True)):
        producer.begin_transaction()
        producer.produce(topic, value=value)
        # librdkafka purges still-queued messages on abort: flush so the aborted one reaches
        # the log and read_uncommitted can see it.
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    assert _consume_all(bootstrap, topic, "read_committed", 2) == [b"one", b"two"]
    assert _consume_all(bootstrap, topic, "read_uncommitted", 3) == [
        b"one",
        b"aborted",
        b"two",
    ]


def test_kafka_transactions(bootstrap_servers: str, make_topic: Callable[..., str]) -> None:
    _check_transactions(bootstrap_servers, make_topic("devenv-txn", partitions=1))


def test_second_kafka_cluster_is_independent_and_transactional(
    bootstrap_servers: str,
    target_bootstrap_servers: str,
    kafka_admin: AdminClient,
    target_kafka_admin: AdminClient,
    make_target_topic: Callable[..., str],
) -> None:
    assert target_bootstrap_servers != bootstrap_servers
    first = kafka_admin.list_topics(timeout=15)
    second = target_kafka_admin.list_topics(timeout=15)
    assert first.cluster_id != second.cluster_id

    topic = make_target_topic("devenv-target-txn", partitions=1)

    assert topic in target_kafka_admin.list_topics(timeout=15).topics
    assert topic not in kafka_admin.list_topics(timeout=15).topics
    _check_transactions(target_bootstrap_servers, topic)
