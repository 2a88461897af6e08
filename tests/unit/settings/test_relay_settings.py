import pytest

from relay.errors import ConfigurationError
from relay.runtime.failpoints import parse
from relay.settings.relay import load_settings

BASE = {
    "RELAY_DATABASE_URL": "postgresql://app:hunter2@db:5432/app",
    "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k1:9092",
}


def test_environment_and_flags_with_flags_winning() -> None:
    env = {**BASE, "RELAY_BATCH_SIZE": "100", "RELAY_KAFKA_PROPERTIES": "linger.ms=5;acks=all"}
    settings = load_settings(
        {"batch_size": 7, "positions_group": None, "kafka_properties": ["linger.ms=9"]},
        environ=env,
    )
    assert settings.batch_size == 7
    assert settings.positions_group is None  # unset: the database's default
    resolved = settings.with_database_defaults("outbox-relay-1a2b3c4d")
    assert resolved.group == "outbox-relay-1a2b3c4d-positions"
    assert resolved.transactional_id(3) == "outbox-relay-1a2b3c4d-3"
    chosen = load_settings({"transactional_id_prefix": "mine"}, environ=BASE)
    assert chosen.with_database_defaults("outbox-relay").transactional_id(0) == "mine-0"
    assert chosen.with_database_defaults("outbox-relay").group == "outbox-relay-positions"
    assert settings.kafka.client_config()["linger.ms"] == "9"
    assert settings.kafka.client_config()["acks"] == "all"
    # The plain postgresql:// scheme gets the psycopg 3 driver.
    assert settings.database_url.reveal().startswith("postgresql+psycopg://app:hunter2@")


def test_secrets_never_show_in_repr_or_description() -> None:
    settings = load_settings({"kafka_properties": ["sasl.password=topsecret"]}, environ=BASE)
    shown = repr(settings) + str(settings.describe())
    assert "hunter2" not in shown
    assert "topsecret" not in shown
    assert "sasl.password=***" in settings.describe()["kafka"]


@pytest.mark.parametrize(
    ("env", "pairs", "message"),
    [
        ({"RELAY_DATABASE_URL": ""}, [], "no database"),
        ({"RELAY_KAFKA_BOOTSTRAP_SERVERS": ""}, [], "no Kafka broker"),
        ({"RELAY_DATABASE_URL": "not a url"}, [], "not a database URL"),
        ({"RELAY_DATABASE_URL": "postgresql+asyncpg://h/db"}, [], "psycopg driver"),
        ({"RELAY_BATCH_SIZE": "many"}, [], "whole number"),
        ({"RELAY_POLL_INTERVAL_S": "-1"}, [], "must be positive"),
        ({"RELAY_CLEANUP": "maybe"}, [], "true or false"),
        ({}, ["enable.idempotence=false"], "set by the relay itself"),
        ({}, ["sasl.password"], "name=value"),
        ({"RELAY_KAFKA_CONFIG_FILE": "/nonexistent/file"}, [], "cannot read"),
    ],
)
def test_bad_settings_raise_configuration_errors(
    env: dict[str, str], pairs: list[str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        load_settings({"kafka_properties": pairs}, environ={**BASE, **env})
    assert "hunter2" not in str(caught.value)


def test_properties_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "client.properties"
    path.write_text("# SASL\nsecurity.protocol=SASL_PLAINTEXT\n\nsasl.mechanism=PLAIN\n")
    settings = load_settings({"kafka_config_file": str(path)}, environ=BASE)
    assert settings.kafka.client_config()["sasl.mechanism"] == "PLAIN"


def test_failpoint_specs() -> None:
    (spec,) = parse("after_commit=raise,partition=2,once=/tmp/x")
    assert (spec.point, spec.action, spec.partition, spec.once_path) == (
        "after_commit",
        "raise",
        2,
        "/tmp/x",
    )
    with pytest.raises(ConfigurationError):
        parse("after_lunch=kill")
