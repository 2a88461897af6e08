"""Protobuf record values decoded without the producer's generated classes: the writer's
schema comes from the registry (``format=serialized``: a FileDescriptorProto, with its
references), the message from the indexes in the record's framing, and the value is the
message as a dict: every field by its .proto name, unset ones with their default (proto3
has no "missing"), an unset message field None, 64-bit integers as ints (not JSON's
strings), enums by name, bytes as base64.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor

_WELL_KNOWN = "google/protobuf/"


class ProtobufValues:
    """Decodes Confluent-framed Protobuf payloads; one descriptor pool per schema id."""

    def __init__(self, client: SchemaRegistryClient) -> None:
        self._client = client
        self._files: dict[int, tuple[descriptor_pool.DescriptorPool, Any]] = {}  # id: pool, proto

    def decode(self, raw: bytes) -> dict[str, Any]:
        """The value as a dict. ValueError for a payload that cannot be parsed; the
        registry's own errors (unknown id, unreachable) pass through."""
        schema_id = SchemaId("PROTOBUF")
        payload = schema_id.from_bytes(io.BytesIO(raw))
        if schema_id.id is None:
            raise ValueError("no schema id in the record's framing")
        pool, proto = self._file(schema_id.id)
        name = _message_name(proto, schema_id.message_indexes or [0])
        message = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))()
        message.ParseFromString(payload.read())
        return as_dict(message)

    def _file(self, schema_id: int) -> tuple[descriptor_pool.DescriptorPool, Any]:
        if schema_id not in self._files:
            schema = self._client.get_schema(schema_id, fmt="serialized")
            pool = descriptor_pool.DescriptorPool()
            for reference in schema.references or []:
                self._add_reference(pool, reference.subject, reference.version, reference.name)
            proto = descriptor_pb2.FileDescriptorProto.FromString(
                base64.b64decode(schema.schema_str or "")
            )
            pool.Add(proto)
            self._files[schema_id] = (pool, proto)
        return self._files[schema_id]

    def _add_reference(
        self, pool: descriptor_pool.DescriptorPool, subject: Any, version: Any, name: Any
    ) -> None:
        if isinstance(name, str) and name.startswith(_WELL_KNOWN):
            proto = descriptor_pb2.FileDescriptorProto()
            descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
            pool.Add(proto)
            return
        found = self._client.get_version(subject, version, fmt="serialized")
        for reference in found.schema.references or []:
            self._add_reference(pool, reference.subject, reference.version, reference.name)
        pool.Add(
            descriptor_pb2.FileDescriptorProto.FromString(
                base64.b64decode(found.schema.schema_str or "")
            )
        )


def _message_name(proto: descriptor_pb2.FileDescriptorProto, indexes: list[int]) -> str:
    """The full name of the message the framing's indexes name: the first into the
    file's messages, each next into the nested ones."""
    message = proto.message_type[indexes[0]]
    parts = [message.name]
    for index in indexes[1:]:
        message = message.nested_type[index]
        parts.append(message.name)
    return ".".join([proto.package, *parts] if proto.package else parts)


def as_dict(message: Any) -> dict[str, Any]:
    return {field.name: _field(field, message) for field in message.DESCRIPTOR.fields}


def _field(field: Any, message: Any) -> Any:
    value = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        entry = field.message_type.fields_by_name["value"]
        return {str(k): _scalar(entry, v) for k, v in value.items()}
    if _repeated(field):
        return [_scalar(field, v) for v in value]
    if field.message_type is not None and not message.HasField(field.name):
        return None
    return _scalar(field, value)


def _repeated(field: Any) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf 5.28 and later (7 has no label)
        return bool(field.is_repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _scalar(field: Any, value: Any) -> Any:
    if field.message_type is not None:
        return as_dict(value)
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value
