"""Exactly-once transactional outbox relay between PostgreSQL and Kafka.

Services call :func:`publish` (with asyncio, :func:`publish_async`) inside their own
database transaction; ``relay run`` (or the Spark job ``jobs/outbox_relay.py``) publishes
committed events to Kafka exactly once. Their unit tests record the events with
:mod:`relay.testing`, without a database.
The package's plan is in ``docs/architecture.md``.

The names below load on first use (PEP 562): ``import relay.replication`` or
``import relay.testing`` loads no database driver; ``relay.publish`` loads the PostgreSQL
writer (:mod:`relay.postgres.outbox_writer`, SQLAlchemy and psycopg) when first used, and
``relay.avro_format`` (and the other Schema Registry formats) confluent-kafka's serializers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relay.errors import (
        InvalidEventError,
        RelayError,
        SchemaRegistryError,
        SchemaRegistryUnavailableError,
        SerializationError,
        UnsupportedBindError,
    )
    from relay.kafka.schema_formats import (
        avro_format,
        json_schema_format,
        protobuf_format,
        schema_registry,
    )
    from relay.postgres.outbox_writer import (
        publish,
        publish_async,
        publish_many,
        publish_many_async,
    )
    from relay.publishing.event_ids import new_event_id
    from relay.publishing.events import Event
    from relay.publishing.json_values import set_json_default

__all__ = [
    "Event",
    "InvalidEventError",
    "RelayError",
    "SchemaRegistryError",
    "SchemaRegistryUnavailableError",
    "SerializationError",
    "UnsupportedBindError",
    "avro_format",
    "json_schema_format",
    "new_event_id",
    "protobuf_format",
    "publish",
    "publish_async",
    "publish_many",
    "publish_many_async",
    "schema_registry",
    "set_json_default",
]
__version__ = "0.1.0"

# Each public name and the module that defines it.
_LAZY = {
    "Event": "relay.publishing.events",
    "InvalidEventError": "relay.errors",
    "RelayError": "relay.errors",
    "UnsupportedBindError": "relay.errors",
    "SerializationError": "relay.errors",
    "SchemaRegistryError": "relay.errors",
    "SchemaRegistryUnavailableError": "relay.errors",
    # Schema Registry formats (the extra outbox-relay[registry]): loads confluent-kafka's
    "schema_registry": "relay.kafka.schema_formats",
    "avro_format": "relay.kafka.schema_formats",
    "json_schema_format": "relay.kafka.schema_formats",
    "protobuf_format": "relay.kafka.schema_formats",
    "new_event_id": "relay.publishing.event_ids",
    "set_json_default": "relay.publishing.json_values",
    "publish": "relay.postgres.outbox_writer",
    "publish_async": "relay.postgres.outbox_writer",
    "publish_many": "relay.postgres.outbox_writer",
    "publish_many_async": "relay.postgres.outbox_writer",
}

if not TYPE_CHECKING:  # hidden from type checkers: a typo stays an error, not Any

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # the next access does not come here
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
