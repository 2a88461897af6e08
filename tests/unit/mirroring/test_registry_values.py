"""The mirror decodes schema registry formats (``format = "avro"`` / ``"json_schema"``):
through the ValueDecoder port in the core, through confluent-kafka's deserializers in the
adapter (relay.kafka.schema_decoding). An undecodable record is a dead letter with its
reason; a registry out of reach is retried (RetriableError), never a dead letter; a field
no column reads is reported (once in the log, every time in a metric) and the rest of the
row applied."""

from __future__ import annotations

import logging
import struct
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from relay.devenv.registry import LocalRegistry
from relay.errors import (
    ConfigurationError,
    DecodeError,
    RetriableError,
    SchemaRegistryUnavailableError,
)
from relay.kafka.schema_decoding import RegistryValueDecoder, json_like
from relay.kafka.schema_formats import SchemaRegistry, avro_format, schema_registry
from relay.mirroring.applier import Applier
from relay.mirroring.decode import decode
from relay.mirroring.mapping import parse_mapping
from relay.mirroring.types import ColumnKind, KafkaRecord, ResolvedTable, Upsert
from relay.settings.mirror import load_mirror_settings
from tests.schema_examples import ORDER_AVRO, ORDER_AVRO_V2

K = ColumnKind
MAPPING: dict[str, Any] = {
    "table": "orders_mirror",
    "topics": ["orders"],
    "format": "avro",
    "key": {"column": "order_key"},
    "version": {"column": "seq"},
    "columns": {"customer": "customer", "total": "total", "order_id": "id"},
}
KINDS = {"order_key": K.TEXT, "customer": K.TEXT, "total": K.FLOAT, "order_id": K.INTEGER}
SEQ = ("outbox-seq", b"5")


def _table(**changes: object) -> ResolvedTable:
    return ResolvedTable(parse_mapping({"tables": [MAPPING | changes]}).tables[0], KINDS)


def _record(value: bytes) -> KafkaRecord:
    return KafkaRecord("orders", 0, 3, b"o-1", value, (SEQ,))


class FakeDecoder:
    def __init__(self, result: object = None, error: Exception | None = None) -> None:
        self.result, self.error = result, error

    def decode(self, value_format: str, topic: str, raw: bytes) -> object:
        if self.error is not None:
            raise self.error
        return self.result


def test_the_mapping_takes_a_format() -> None:
    assert _table().mapping.value_format == "avro"
    assert _table(format="json").mapping.value_format == "json"
    with pytest.raises(ConfigurationError, match="format must be one of json, avro, json_schema"):
        _table(format="xml")
    other = MAPPING | {"table": "other", "format": "json"}
    with pytest.raises(ConfigurationError, match="topic orders is mapped with format avro and"):
        parse_mapping({"tables": [MAPPING, other]})


def test_a_decoded_value_fills_the_columns_and_a_new_field_is_reported() -> None:
    value = {"id": 1, "customer": "ada", "total": 9.5, "coupon": "X1"}
    decoded = decode(_record(b"\0..."), [_table()], FakeDecoder(value))
    assert decoded.error is None
    assert decoded.ops == (
        Upsert(
            "orders_mirror",
            {"order_key": "o-1", "customer": "ada", "total": 9.5, "order_id": 1, "seq": 5},
        ),
    )
    assert decoded.unmapped == (
        ("orders_mirror", "coupon", "ALTER TABLE orders_mirror ADD COLUMN coupon text"),
    )


def test_a_field_named_like_a_column_filled_from_elsewhere_is_not_reported() -> None:
    """The table has the column (filled from the key here): no ALTER TABLE to suggest."""
    value = {"id": 1, "order_key": "o-1", "customer": "ada", "total": 9.5}
    decoded = decode(_record(b"\0..."), [_table()], FakeDecoder(value))
    assert decoded.error is None
    assert decoded.unmapped == ()


def test_an_undecodable_record_is_a_dead_letter_and_an_outage_is_not() -> None:
    bad = FakeDecoder(error=DecodeError("schema id 99 is not in the schema registry"))
    assert decode(_record(b"x"), [_table()], bad).error == (
        "orders_mirror: schema id 99 is not in the schema registry"
    )
    assert "needs a schema registry" in str(decode(_record(b"x"), [_table()]).error)
    down = FakeDecoder(error=SchemaRegistryUnavailableError("unreachable"))
    with pytest.raises(RetriableError):
        decode(_record(b"x"), [_table()], down)


def test_the_applier_logs_a_new_field_once_and_counts_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counted: list[tuple[str, str]] = []
    value = {"id": 1, "customer": "ada", "total": 9.5, "coupon": "X1"}
    applier = Applier(
        [_table()],
        store=None,  # type: ignore[arg-type]
        decoder=FakeDecoder(value),
        on_unmapped=lambda table, field: counted.append((table, field)),
    )
    with caplog.at_level(logging.WARNING):
        applier.batch("orders", 0, None, 5, [_record(b"a"), _record(b"b")])
        applier.batch("orders", 0, 5, 6, [_record(b"c")])
    assert counted == [("orders_mirror", "coupon")] * 3
    lines = [r.getMessage() for r in caplog.records if "coupon" in r.getMessage()]
    assert len(lines) == 1
    assert "ALTER TABLE orders_mirror ADD COLUMN coupon text" in lines[0]


@pytest.fixture
def mock_registry() -> SchemaRegistry:
    client = SchemaRegistryClient.new_client({"url": "mock://"})
    return SchemaRegistry(client, "mock://")


def test_the_adapter_decodes_avro_written_by_the_write_api(mock_registry: SchemaRegistry) -> None:
    raw = avro_format(ORDER_AVRO_V2, mock_registry, auto_register=True).serialize(
        "orders", {"id": 1, "customer": "ada", "total": 9.5, "coupon": None}, is_key=False
    )
    decoder = RegistryValueDecoder(mock_registry)
    assert decoder.decode("avro", "orders", raw) == {
        "id": 1,
        "customer": "ada",
        "total": 9.5,
        "coupon": None,
    }


def test_the_adapter_names_what_is_wrong_with_an_undecodable_record(
    mock_registry: SchemaRegistry,
) -> None:
    decoder = RegistryValueDecoder(mock_registry)
    with pytest.raises(
        DecodeError, match=r"not in the schema registry's wire format .*magic byte 7b"
    ):
        decoder.decode("avro", "orders", b'{"id": 1}')
    with pytest.raises(DecodeError, match="schema id 4242 is not in the schema registry"):
        decoder.decode("avro", "orders", struct.pack(">bI", 0, 4242) + b"\x02")
    number = mock_registry.client.register_schema("orders-value", Schema(ORDER_AVRO, "AVRO"))
    with pytest.raises(DecodeError, match=f"avro value \\(schema id {number}\\) cannot be decoded"):
        decoder.decode("avro", "orders", struct.pack(">bI", 0, number) + b"\xff")


def test_a_registry_out_of_reach_is_retriable() -> None:
    down = LocalRegistry()
    env = {"RELAY_SCHEMA_REGISTRY_URL": down.url, "RELAY_SCHEMA_REGISTRY_RETRIES": "0"}
    down.stop()
    decoder = RegistryValueDecoder(schema_registry(environ=env))
    with pytest.raises(SchemaRegistryUnavailableError, match="unreachable"):
        decoder.decode("avro", "orders", struct.pack(">bI", 0, 1) + b"\x02")


def test_logical_types_become_what_a_json_producer_writes() -> None:
    from datetime import UTC, date, datetime

    moment = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    assert json_like({"at": moment, "d": date(2026, 1, 2), "n": Decimal("1.50"), "b": b"\x01"}) == {
        "at": "2026-11-26T12:00:00+00:00",
        "d": "2026-01-02",
        "n": "1.50",
        "b": "AQ==",
    }


def test_the_mirror_reads_the_registry_settings_when_given() -> None:
    env = {
        "RELAY_DATABASE_URL": "postgresql://app:pw@db/app",
        "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
        "RELAY_MIRROR_CONFIG": "m.toml",
    }
    assert load_mirror_settings(environ=env).registry is None
    env |= {"RELAY_SCHEMA_REGISTRY_URL": "http://u:sr-pw@sr:8081"}
    settings = load_mirror_settings(environ=env)
    assert settings.registry is not None
    assert settings.describe()["schema_registry"] == "http://u:***@sr:8081"


def test_the_adapter_decodes_protobuf_without_the_generated_class(
    mock_registry: SchemaRegistry,
) -> None:
    from relay.kafka.schema_formats import protobuf_format
    from tests.schema_examples import OrderMessage

    raw = protobuf_format(OrderMessage, mock_registry, auto_register=True).serialize(
        "orders", OrderMessage(id=7, customer="ada"), is_key=False
    )
    decoder = RegistryValueDecoder(mock_registry)
    # every field, an unset one with its default; a 64-bit integer as an int
    assert decoder.decode("protobuf", "orders", raw) == {"id": 7, "customer": "ada", "total": 0.0}
    with pytest.raises(DecodeError, match=r"protobuf value .* cannot be decoded"):
        decoder.decode("protobuf", "orders", raw[:6] + b"\xff\xff\xff")


def test_the_registry_settings_travel_to_spark_tasks() -> None:
    import pickle

    env = {
        "RELAY_DATABASE_URL": "postgresql://app:pw@db/app",
        "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
        "RELAY_MIRROR_CONFIG": "m.toml",
        "RELAY_SCHEMA_REGISTRY_URL": "http://sr:8081",
        "RELAY_SCHEMA_REGISTRY_USER": "u",
        "RELAY_SCHEMA_REGISTRY_PASSWORD": "sr-secret",
    }
    settings = load_mirror_settings(environ=env)
    shipped = pickle.loads(pickle.dumps(settings))  # as Spark ships them to its tasks
    assert shipped.registry == settings.registry
    assert shipped.registry.password.reveal() == "sr-secret"
    assert "sr-secret" not in repr(shipped)


def test_a_registry_format_without_a_registry_stops_the_mirror_at_start_up() -> None:
    from relay.commands.mirror import value_decoder

    env = {
        "RELAY_DATABASE_URL": "postgresql://app:pw@db/app",
        "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
        "RELAY_MIRROR_CONFIG": "m.toml",
    }
    settings = load_mirror_settings(environ=env)
    assert value_decoder(settings, [_table(format="json")]) is None
    with pytest.raises(ConfigurationError, match="table orders_mirror has a schema registry"):
        value_decoder(settings, [_table()])
    with_registry = load_mirror_settings(environ=env | {"RELAY_SCHEMA_REGISTRY_URL": "mock://"})
    assert isinstance(value_decoder(with_registry, [_table()]), RegistryValueDecoder)
