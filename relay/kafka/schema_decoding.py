"""The mirror's side of the schema registry: record values of a ``format = "avro"``,
``"json_schema"`` or ``"protobuf"`` table decoded through confluent-kafka's deserializers
(Protobuf: :mod:`relay.kafka.protobuf_values`)
(:class:`relay.mirroring.ports.ValueDecoder`).

A record that is itself undecodable (not the Confluent wire format, a schema id the
registry does not know, a payload that does not fit its schema) is a DecodeError: the
mirror dead-letters it with the reason. A registry out of reach (refused, timed out,
HTTP 5xx) is a SchemaRegistryUnavailableError, a RetriableError: the mirror retries the
batch and never dead-letters a record for it. Credentials the registry refuses stop the
mirror (SchemaRegistryError).
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Callable
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.error import SchemaRegistryError as ClientRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from relay.errors import DecodeError, SchemaRegistryError, SchemaRegistryUnavailableError
from relay.kafka.protobuf_values import ProtobufValues
from relay.kafka.schema_formats import (
    SchemaRegistry,
    is_transport_error,
    registry_answer,
    schema_registry,
)
from relay.settings.registry import RegistrySettings

_HEADER = struct.Struct(">bI")  # magic byte 0, schema id


class RegistryValueDecoder:
    """Decodes ``avro`` and ``json_schema`` values into JSON-like objects."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry
        client = registry.client
        protobuf = ProtobufValues(client)  # no generated class: the writer's schema
        self._deserializers: dict[str, Callable[[bytes, SerializationContext], Any]] = {
            "avro": AvroDeserializer(client),
            "json_schema": JSONDeserializer(None, schema_registry_client=client),
            "protobuf": lambda raw, _ctx: protobuf.decode(raw),
        }

    def decode(self, value_format: str, topic: str, raw: bytes) -> object:
        deserializer = self._deserializers.get(value_format)
        if deserializer is None:
            raise DecodeError(f"no decoder for value format {value_format!r}")
        if len(raw) < _HEADER.size or raw[0] != 0:
            shown = raw[:1].hex() or "none"
            raise DecodeError(
                f"value is not in the schema registry's wire format (magic byte {shown},"
                f" expected 00, and a 4-byte schema id)"
            )
        schema_id = _HEADER.unpack_from(raw)[1]
        try:
            value = deserializer(raw, SerializationContext(topic, MessageField.VALUE))
        except ClientRegistryError as exc:
            raise self._refused(exc, schema_id) from None
        except Exception as exc:
            if is_transport_error(exc):
                raise SchemaRegistryUnavailableError(
                    f"schema registry {self._registry.shown_url} unreachable: "
                    + self._registry.mask(f"{type(exc).__name__}: {exc}")
                ) from None
            raise DecodeError(
                f"{value_format} value (schema id {schema_id}) cannot be decoded: "
                + self._registry.mask(str(exc) or type(exc).__name__)
            ) from None
        return json_like(value)

    def _refused(self, exc: ClientRegistryError, schema_id: int) -> Exception:
        shown, reason = self._registry.shown_url, self._registry.mask(str(exc))
        answer = registry_answer(exc)
        if answer == "unavailable":
            return SchemaRegistryUnavailableError(f"schema registry {shown} failed: {reason}")
        if answer == "not_found":
            return DecodeError(f"schema id {schema_id} is not in the schema registry ({reason})")
        return SchemaRegistryError(f"schema registry {shown} refused: {reason}")


def registry_decoder(settings: RegistrySettings) -> RegistryValueDecoder:
    return RegistryValueDecoder(schema_registry(settings))


def json_like(value: object) -> object:
    """Avro's logical types as a JSON producer writes them: dates and times as ISO 8601
    text, decimals and UUIDs as text, bytes as base64; the mirror's column conversions
    (relay.mirroring.decode) take it from there."""
    if isinstance(value, dict):
        return {str(k): json_like(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_like(v) for v in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value
