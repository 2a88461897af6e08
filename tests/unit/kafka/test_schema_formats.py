"""Schema Registry formats of the write API (relay.kafka.schema_formats): the Confluent wire
format, subject name strategies, auto-registration off unless asked, the latest version
on request, and every failure a clear error of our tree with the password masked.

Against the client's in-process registry (``mock://``) and, for the HTTP path, the
stand-in registry the tests serve themselves (relay.devenv.registry)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from relay.devenv.registry import LocalRegistry, local_registry
from relay.errors import (
    ConfigurationError,
    InvalidEventError,
    RetriableError,
    SchemaRegistryError,
    SchemaRegistryUnavailableError,
    SerializationError,
)
from relay.kafka.schema_formats import (
    avro_format,
    json_schema_format,
    protobuf_format,
    schema_registry,
)
from relay.publishing.events import Event, outbox_rows
from relay.settings.registry import load_registry_settings
from relay.testing import capture_events
from tests.schema_examples import ORDER_AVRO, ORDER_AVRO_V2, ORDER_JSON_SCHEMA, OrderMessage

ORDER = {"id": 42, "customer": "ada", "total": 99.5}
VALUE = SerializationContext("orders", MessageField.VALUE)


@pytest.fixture
def mock_client() -> Iterator[SchemaRegistryClient]:
    yield SchemaRegistryClient.new_client({"url": "mock://"})  # in-process, its own store


@pytest.fixture
def standin() -> Iterator[LocalRegistry]:
    with local_registry(user="svc", password="s3cret-pw") as registry:
        yield registry


def _registry_env(standin: LocalRegistry, password: str = "s3cret-pw") -> dict[str, str]:
    return {
        "RELAY_SCHEMA_REGISTRY_URL": standin.url,
        "RELAY_SCHEMA_REGISTRY_USER": "svc",
        "RELAY_SCHEMA_REGISTRY_PASSWORD": password,
        "RELAY_SCHEMA_REGISTRY_TIMEOUT_S": "5",
        "RELAY_SCHEMA_REGISTRY_RETRIES": "0",
    }


def _schema_id(data: bytes) -> int:
    magic, number = struct.unpack(">bI", data[:5])
    assert magic == 0  # the Confluent wire format's magic byte
    return int(number)


def test_avro_value_in_the_confluent_wire_format(mock_client: SchemaRegistryClient) -> None:
    registered = mock_client.register_schema("orders-value", Schema(ORDER_AVRO, "AVRO"))
    data = avro_format(ORDER_AVRO, mock_client).serialize("orders", ORDER, is_key=False)
    assert _schema_id(data) == registered
    assert AvroDeserializer(mock_client)(data, VALUE) == ORDER


def test_auto_registration_is_off_by_default(standin: LocalRegistry) -> None:
    registry = schema_registry(environ=_registry_env(standin))
    with pytest.raises(SerializationError, match=r"not registered .*register the schema first"):
        avro_format(ORDER_AVRO, registry).serialize("orders", ORDER, is_key=False)
    assert standin.state.subjects == {}  # looked up, never registered
    assert "POST /subjects/orders-value" in standin.state.requests


def test_a_schema_registered_by_the_pipeline_is_looked_up(standin: LocalRegistry) -> None:
    number = standin.register("orders-value", ORDER_AVRO)
    registry = schema_registry(environ=_registry_env(standin))
    data = avro_format(ORDER_AVRO, registry).serialize("orders", ORDER, is_key=False)
    assert _schema_id(data) == number
    assert AvroDeserializer(registry.client)(data, VALUE) == ORDER


def test_auto_register_on_request_and_the_subject_strategies(standin: LocalRegistry) -> None:
    registry = schema_registry(environ=_registry_env(standin))
    for strategy in ("topic", "record", "topic_record"):
        avro_format(ORDER_AVRO, registry, auto_register=True, subject_strategy=strategy).serialize(
            "orders", ORDER, is_key=False
        )
    avro_format(ORDER_AVRO, registry, auto_register=True).serialize("orders", ORDER, is_key=True)
    assert sorted(standin.state.subjects) == [
        "orders-key",
        "orders-shop.Order",
        "orders-value",
        "shop.Order",
    ]
    with pytest.raises(SchemaRegistryError, match="unknown subject name strategy 'topics'"):
        avro_format(ORDER_AVRO, registry, subject_strategy="topics")  # type: ignore[arg-type]


def test_use_latest_version_serializes_with_the_subjects_latest(standin: LocalRegistry) -> None:
    standin.register("orders-value", ORDER_AVRO)
    latest = standin.register("orders-value", ORDER_AVRO_V2)
    registry = schema_registry(environ=_registry_env(standin))
    data = avro_format(ORDER_AVRO, registry, use_latest_version=True).serialize(
        "orders", ORDER, is_key=False
    )
    assert _schema_id(data) == latest
    assert AvroDeserializer(registry.client)(data, VALUE) == {**ORDER, "coupon": None}
    with pytest.raises(ConfigurationError, match="exclude each other"):
        avro_format(ORDER_AVRO, registry, use_latest_version=True, auto_register=True)


def test_a_value_the_schema_refuses_is_a_serialization_error(
    mock_client: SchemaRegistryClient,
) -> None:
    orders = avro_format(ORDER_AVRO, mock_client, auto_register=True)
    with pytest.raises(SerializationError, match="event value for topic 'orders' does not fit"):
        orders.serialize(
            "orders", {"id": "not a number", "customer": "x", "total": 1.0}, is_key=False
        )
    schema = json_schema_format(ORDER_JSON_SCHEMA, mock_client, auto_register=True)
    with pytest.raises(SerializationError, match="JSON Schema"):
        schema.serialize("orders", {"id": 1}, is_key=False)
    proto = protobuf_format(OrderMessage, mock_client, auto_register=True)
    with pytest.raises(SerializationError, match="Protobuf"):
        proto.serialize("orders", {"id": 1}, is_key=False)  # a dict, not the message type


def test_json_schema_and_protobuf_round_trip(mock_client: SchemaRegistryClient) -> None:
    data = json_schema_format(ORDER_JSON_SCHEMA, mock_client, auto_register=True).serialize(
        "orders", ORDER, is_key=False
    )
    _schema_id(data)
    assert (
        JSONDeserializer(ORDER_JSON_SCHEMA, schema_registry_client=mock_client)(data, VALUE)
        == ORDER
    )
    message = OrderMessage(id=42, customer="ada", total=99.5)
    data = protobuf_format(OrderMessage, mock_client, auto_register=True).serialize(
        "orders", message, is_key=False
    )
    _schema_id(data)
    decoded = ProtobufDeserializer(OrderMessage, {"use.deprecated.format": False})(data, VALUE)
    assert decoded == message


def test_a_registry_outage_is_retriable_and_masks_the_password() -> None:
    registry = LocalRegistry(user="svc", password="s3cret-pw")
    env = _registry_env(registry)
    registry.stop()  # the registry is down
    env["RELAY_SCHEMA_REGISTRY_URL"] = env["RELAY_SCHEMA_REGISTRY_URL"].replace(
        "http://", "http://svc:url-pw@"
    )
    env.pop("RELAY_SCHEMA_REGISTRY_USER")
    env.pop("RELAY_SCHEMA_REGISTRY_PASSWORD")
    reg = schema_registry(environ=env)
    with pytest.raises(SchemaRegistryUnavailableError, match="unreachable") as caught:
        avro_format(ORDER_AVRO, reg).serialize("orders", ORDER, is_key=False)
    assert isinstance(caught.value, RetriableError)
    assert "url-pw" not in str(caught.value)
    assert "url-pw" not in repr(reg)
    assert "svc:***@127.0.0.1" in str(caught.value)


def test_wrong_credentials_are_refused_without_showing_them(standin: LocalRegistry) -> None:
    standin.register("orders-value", ORDER_AVRO)
    registry = schema_registry(environ=_registry_env(standin, password="wrong-pw"))
    with pytest.raises(SchemaRegistryError, match="refused: Unauthorized") as caught:
        avro_format(ORDER_AVRO, registry).serialize("orders", ORDER, is_key=False)
    assert not isinstance(caught.value, RetriableError)
    assert "wrong-pw" not in str(caught.value)


def test_settings_mask_their_secrets() -> None:
    settings = load_registry_settings(
        environ={
            "RELAY_SCHEMA_REGISTRY_URL": "https://u:url-pw@sr1:8081, https://sr2:8081",
            "RELAY_SCHEMA_REGISTRY_USER": "key",
            "RELAY_SCHEMA_REGISTRY_PASSWORD": "api-secret",
            "RELAY_SCHEMA_REGISTRY_CA": "/etc/ca.pem",
        }
    )
    shown = repr(settings)
    assert "url-pw" not in shown
    assert "api-secret" not in shown
    assert "https://u:***@sr1:8081" in shown
    assert "ca_location=/etc/ca.pem" in shown
    assert settings.password is not None and settings.password.reveal() == "api-secret"
    with pytest.raises(
        ConfigurationError, match="no schema registry: set RELAY_SCHEMA_REGISTRY_URL"
    ):
        load_registry_settings(environ={})
    with pytest.raises(ConfigurationError, match="RELAY_SCHEMA_REGISTRY_URL must be http"):
        load_registry_settings(environ={"RELAY_SCHEMA_REGISTRY_URL": "sr:8081"})
    with pytest.raises(ConfigurationError, match="both RELAY_SCHEMA_REGISTRY_USER"):
        load_registry_settings(
            environ={"RELAY_SCHEMA_REGISTRY_URL": "http://sr", "RELAY_SCHEMA_REGISTRY_USER": "u"}
        )


def test_the_write_api_stores_the_formats_bytes(mock_client: SchemaRegistryClient) -> None:
    orders = avro_format(ORDER_AVRO, mock_client, auto_register=True)
    keys = avro_format('"string"', mock_client, auto_register=True)
    [row, tombstone] = outbox_rows(
        [Event("orders", "o-42", ORDER), Event("orders", "o-43", None)],
        key_format=keys,
        value_format=orders,
    )
    assert AvroDeserializer(mock_client)(row["value"], VALUE) == ORDER
    assert AvroDeserializer(mock_client)(row["key"], VALUE) == "o-42"
    assert tombstone["value"] is None  # a tombstone stays one
    with capture_events() as outbox:
        import relay

        relay.publish(None, "orders", "o-44", ORDER, value_format=orders)  # type: ignore[arg-type]
    assert outbox.events[0].value == orders.serialize("orders", ORDER, is_key=False)


def test_a_failing_event_stops_the_call_before_any_row(mock_client: SchemaRegistryClient) -> None:
    orders = avro_format(ORDER_AVRO, mock_client, auto_register=True)
    bad: dict[str, Any] = {"id": 1}
    with pytest.raises(SerializationError):
        outbox_rows([Event("orders", "a", ORDER), Event("orders", "b", bad)], value_format=orders)
    with pytest.raises(InvalidEventError, match="value_format must have a serialize"):
        outbox_rows([Event("orders", "a", ORDER)], value_format=object())  # type: ignore[arg-type]


def test_the_tls_settings_reach_the_client(tmp_path: Any) -> None:
    env = {
        "RELAY_SCHEMA_REGISTRY_URL": "https://sr:8081",
        "RELAY_SCHEMA_REGISTRY_CA": str(tmp_path / "missing-ca.pem"),
    }
    with pytest.raises(SchemaRegistryError, match=r"schema registry https://sr:8081: .*No such"):
        schema_registry(environ=env)
    env["RELAY_SCHEMA_REGISTRY_CA"] = ""
    env["RELAY_SCHEMA_REGISTRY_KEY"] = str(tmp_path / "key.pem")
    with pytest.raises(SchemaRegistryError, match=r"ssl\.certificate\.location required"):
        schema_registry(environ=env)  # a key without its certificate
