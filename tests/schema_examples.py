"""Schemas the registry-format tests share: an Avro record, a JSON Schema and a Protobuf
message type (built from a descriptor at run time: no protoc here)."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_ORDER_FIELDS = [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "total", "type": "double"},
]
ORDER_AVRO = json.dumps(
    {"type": "record", "name": "Order", "namespace": "shop", "fields": _ORDER_FIELDS}
)
# The same record one version later: a field added, with a default (backward compatible).
ORDER_AVRO_V2 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [*_ORDER_FIELDS, {"name": "coupon", "type": ["null", "string"], "default": None}],
    }
)
ORDER_JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "customer": {"type": "string"},
            "total": {"type": "number"},
        },
        "required": ["id", "customer", "total"],
        "additionalProperties": False,
    }
)


def _order_message() -> Any:
    proto = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto", package="shop", syntax="proto3"
    )
    message = proto.message_type.add(name="Order")
    kinds = descriptor_pb2.FieldDescriptorProto
    for number, (name, kind) in enumerate(
        (("id", kinds.TYPE_INT64), ("customer", kinds.TYPE_STRING), ("total", kinds.TYPE_DOUBLE)),
        start=1,
    ):
        message.field.add(name=name, number=number, type=kind, label=kinds.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


OrderMessage = _order_message()
