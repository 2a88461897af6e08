"""CloudEvents 1.0, Kafka protocol binding, binary content mode, on the topics that ask.

The record's value stays the event's data as it is; the relay adds the attributes as
``ce_*`` headers when it publishes a row of a topic of ``--cloudevents-topics``:

* ``ce_specversion``: ``1.0``;
* ``ce_id``: the event id (the ``event-id`` header the write API gives each event: a
  UUIDv7); a row without one (plain SQL) gets ``outbox-<outbox id>``, unique within its
  database (the source) as long as the database is not restored or cloned;
* ``ce_source``: ``--cloudevents-source`` (default: the outbox database's URL without
  user or password, ``postgresql://host:port/db``);
* ``ce_type``: the event type; a row with none (and no ``ce_type`` header of its own)
  cannot be a CloudEvent and goes to ``outbox_dead_letters`` (I5);
* ``ce_time``: when the row's transaction committed (RFC 3339, UTC, milliseconds), read
  from its commit marker (``outbox_commits.committed_at``); rows sequenced before the
  marker had the column carry none (the attribute is optional);
* ``content-type`` (the ``datacontenttype``): ``application/json`` when the record has a
  value; a tombstone (no value) is an event with no data and has none, and a value in the
  Confluent wire format (Avro, Protobuf, JSON Schema through a schema registry: magic byte
  0) none either, unless the event gives its own ``content-type`` header.

An attribute the event already carries as a header of its own (``ce_subject``, or its own
``ce_source`` or ``content-type``, say) is kept as it is and not added again: each
attribute appears once. Why the relay and not the write API: ``ce_time`` must be the commit
time, which no writer knows before it commits; making a topic a CloudEvents topic is the
consumers' contract, decided in one place (the relay's setting), and it applies to every
row of the topic, plain-SQL writers and rows written before the switch included; the
outbox row stays what the service wrote.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import lru_cache

from relay.errors import UndeliverableEventError
from relay.publishing.events import EVENT_ID_HEADER
from relay.publishing.ports import PublisherDecorator, TransactionalPublisher
from relay.publishing.types import Headers, OutboxRecord

SPEC_VERSION = b"1.0"
JSON_CONTENT_TYPE = b"application/json"
CONTENT_TYPE = "content-type"
WIRE_FORMAT_MAGIC = b"\x00"
PREFIX = "ce_"
NO_TYPE = "a CloudEvents topic's event needs an event type (ce_type): this row has none"


@lru_cache(maxsize=256)  # the rows of one transaction share their commit time
def rfc3339(millis: int) -> bytes:
    """``millis`` since the epoch as an RFC 3339 UTC time with milliseconds."""
    t = time.gmtime(millis // 1000)
    return b"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (
        t.tm_year,
        t.tm_mon,
        t.tm_mday,
        t.tm_hour,
        t.tm_min,
        t.tm_sec,
        millis % 1000,
    )


def _json_data(value: bytes | None) -> bool:
    """Whether ``value`` is taken for JSON data: any value but a tombstone and the
    Confluent wire format (magic byte 0, which no JSON text starts with), the bytes of the
    write API's schema registry formats (relay.publishing.formats)."""
    return value is not None and value[:1] != WIRE_FORMAT_MAGIC


def _event_id(record: OutboxRecord) -> bytes:
    for name, value in record.headers:
        if name == EVENT_ID_HEADER and value:
            return value
    return b"outbox-%d" % record.id


def _with_headers(r: OutboxRecord, headers: Headers) -> OutboxRecord:
    """``replace(r, headers=headers)`` in half its time."""
    return OutboxRecord(
        r.id,
        r.partition,
        r.seq,
        r.topic,
        r.key,
        r.value,
        r.event_type,
        headers,
        r.timestamp_ms,
        r.follows,
        r.committed_ms,
    )


def _is_attribute(name: str) -> bool:
    return name.startswith(PREFIX) or name == CONTENT_TYPE


class CloudEvents:
    """The topics whose records are CloudEvents, and the ``ce_source`` they carry."""

    __slots__ = ("_source", "source", "topics")

    def __init__(self, topics: frozenset[str], source: str) -> None:
        self.topics = topics
        self.source = source
        self._source = (("ce_source", source.encode()),)

    def applies(self, topic: str) -> bool:
        return topic in self.topics

    def headers(self, record: OutboxRecord) -> Headers | None:
        """The headers ``record`` is published with: its own and the attributes it lacks.
        None when it cannot be a CloudEvent (no event type)."""
        own = record.headers
        if any(_is_attribute(name) for name, _ in own):
            return self._merged(record)
        if record.event_type is None:
            return None
        added: Headers = (
            ("ce_specversion", SPEC_VERSION),
            ("ce_id", _event_id(record)),
            *self._source,
            ("ce_type", record.event_type.encode()),
        )
        if record.committed_ms > 0:
            added += (("ce_time", rfc3339(record.committed_ms)),)
        if _json_data(record.value):
            added += ((CONTENT_TYPE, JSON_CONTENT_TYPE),)
        return own + added

    def _merged(self, record: OutboxRecord) -> Headers | None:
        """:meth:`headers` of a record that brings attributes of its own: those stay."""
        own = {name for name, _ in record.headers}
        if record.event_type is None and "ce_type" not in own:
            return None
        wanted: list[tuple[str, bytes | None]] = [
            ("ce_specversion", SPEC_VERSION),
            ("ce_id", _event_id(record)),
            *self._source,
        ]
        if record.event_type is not None:
            wanted.append(("ce_type", record.event_type.encode()))
        if record.committed_ms > 0:
            wanted.append(("ce_time", rfc3339(record.committed_ms)))
        if _json_data(record.value):
            wanted.append((CONTENT_TYPE, JSON_CONTENT_TYPE))
        return (*record.headers, *((n, v) for n, v in wanted if n not in own))


class CloudEventsPublisher(PublisherDecorator):
    """A publisher whose records of CloudEvents topics carry their ``ce_*`` headers; rows
    that cannot be CloudEvents are refused for good (UndeliverableEventError: the relay
    moves them to the dead letters and publishes the rest)."""

    def __init__(self, inner: TransactionalPublisher, cloudevents: CloudEvents) -> None:
        super().__init__(inner)
        self._cloudevents = cloudevents

    def send(self, records: Sequence[OutboxRecord]) -> None:
        applies, headers = self._cloudevents.applies, self._cloudevents.headers
        sent: list[OutboxRecord] = []
        refused: list[int] = []
        for record in records:
            if not applies(record.topic):
                sent.append(record)
            elif (found := headers(record)) is None:
                refused.append(record.id)
            else:
                sent.append(_with_headers(record, found))
        if refused:
            raise UndeliverableEventError(
                f"outbox rows {refused} of CloudEvents topics cannot be published: {NO_TYPE}",
                tuple(refused),
                NO_TYPE,
            )
        self._inner.send(sent)
