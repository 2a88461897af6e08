"""Record formats: how the write API serializes an event's key or value with a schema.

A :class:`RecordFormat` turns the object a service gives into the bytes the Kafka record
will carry, in the service's own process and transaction, before the outbox row is
written. The outbox then holds exactly those bytes and the relay publishes them as they
are: it stays format-blind, so a registry outage or a record the schema refuses fails the
service's write (nothing is written) and can never fail the relay later.

The formats of a Confluent Schema Registry (Avro, Protobuf, JSON Schema) are in
:mod:`relay.kafka.schema_formats`; any object with this method is one.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class RecordFormat(Protocol):
    """Serializes one key or value for ``topic``."""

    def serialize(self, topic: str, obj: Any, *, is_key: bool) -> bytes:
        """The record's bytes for ``obj``. Raises :class:`relay.errors.SerializationError`
        when ``obj`` does not fit, :class:`relay.errors.SchemaRegistryError` (or its
        ``...UnavailableError``) when the registry refuses or cannot be reached."""
        ...
