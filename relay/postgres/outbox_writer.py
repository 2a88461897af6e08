"""The write API: add events to the caller's own database transaction.

>>> with Session(engine) as session, session.begin():
...     session.add(Order(id=42, total=99))
...     relay.publish(session, "orders", key="order-42", value={"id": 42, "total": 99},
...                   event_type="OrderPlaced")

The event is an ``INSERT`` through the caller's session or connection, so it commits or
rolls back together with the business rows (I1, docs/invariants.md); nothing here commits.
Nothing is sent to Kafka here; the relay publishes the row after it commits.

Every stack runs the one statement :data:`INSERT_EVENT` with the parameters
:func:`relay.publishing.events.outbox_rows` checked and encoded:

* :func:`publish` / :func:`publish_many`: a SQLAlchemy ``Session``, ``scoped_session``
  (Flask-SQLAlchemy's ``db.session``) or ``Connection``, or a ``psycopg.Connection``;
* :func:`publish_async` / :func:`publish_many_async`: an ``AsyncSession``,
  ``async_scoped_session`` or ``AsyncConnection``, or a ``psycopg.AsyncConnection``.

A connection in autocommit mode is refused unless a transaction is open on it (psycopg's
``conn.transaction()``): each INSERT would commit on its own, apart from the business rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, TypeAlias

import psycopg
from psycopg import pq
from sqlalchemy import Connection, text
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
from sqlalchemy.orm import Session, scoped_session
from sqlalchemy.pool import PoolProxiedConnection

from relay.errors import UnsupportedBindError
from relay.publishing.event_ids import new_event_id
from relay.publishing.events import Event, HeadersLike, KeyLike, outbox_rows
from relay.publishing.formats import RecordFormat
from relay.publishing.json_values import JsonDefault

SyncBind: TypeAlias = Session | scoped_session[Session] | Connection | psycopg.Connection[Any]
AsyncBind: TypeAlias = (
    AsyncSession
    | async_scoped_session[AsyncSession]
    | AsyncConnection
    | psycopg.AsyncConnection[Any]
)

# The columns a writer sets; the triggers set partition and seq, the defaults the rest.
INSERT_EVENT = text(
    "INSERT INTO outbox (topic, key, value, event_type, headers)"
    " VALUES (:topic, :key, :value, :event_type, CAST(:headers AS jsonb))"
)
# The same statement in psycopg's parameter style (%(name)s), for psycopg used directly.
_PSYCOPG = PGDialect_psycopg()  # type: ignore[no-untyped-call]
INSERT_EVENT_PSYCOPG = str(INSERT_EVENT.compile(dialect=_PSYCOPG))

SYNC_TYPES = (Session, scoped_session, Connection, psycopg.Connection)
ASYNC_TYPES = (AsyncSession, async_scoped_session, AsyncConnection, psycopg.AsyncConnection)
_SYNC = (
    "relay.publish / relay.publish_many",
    "a SQLAlchemy Session, scoped_session or Connection, or a psycopg.Connection",
)
_ASYNC = (
    "await relay.publish_async / relay.publish_many_async",
    "a SQLAlchemy AsyncSession, async_scoped_session or AsyncConnection,"
    " or a psycopg.AsyncConnection",
)


def check_bind(bind: object, *, asynchronous: bool) -> None:
    """Refuse, before anything is checked or written, what this API cannot write through:
    the other API's kind (the error names the API to use) or an unknown type."""
    own_types, other_types = (
        (ASYNC_TYPES, SYNC_TYPES) if asynchronous else (SYNC_TYPES, ASYNC_TYPES)
    )
    (api, kinds), (other_api, _) = (_ASYNC, _SYNC) if asynchronous else (_SYNC, _ASYNC)
    if isinstance(bind, own_types):
        return
    given = type(bind).__name__
    if isinstance(bind, other_types):
        mode = "synchronous" if asynchronous else "asynchronous"
        raise UnsupportedBindError(f"{given} is {mode}: use {other_api}, not {api}")
    raise UnsupportedBindError(
        f"{api} writes through the caller's transaction: {kinds}, not {given}"
    )


def check_in_transaction(autocommit: bool, transaction_status: int | None) -> None:
    """Refuse a connection whose INSERT would commit on its own: autocommit on and no
    transaction open (``transaction_status`` is libpq's, None where the driver hides it)."""
    if autocommit and transaction_status in (None, pq.TransactionStatus.IDLE):
        raise UnsupportedBindError(
            "the connection is in autocommit mode: each event would commit on its own, "
            "not with your business rows; open a transaction (psycopg: conn.transaction(); "
            "SQLAlchemy: an isolation level other than AUTOCOMMIT)"
        )


def _check_psycopg(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    check_in_transaction(conn.autocommit, conn.info.transaction_status)


def _check_pooled(raw: PoolProxiedConnection) -> None:
    """A SQLAlchemy connection's driver connection (AUTOCOMMIT sets the driver's flag)."""
    driver = raw.driver_connection
    if isinstance(driver, psycopg.Connection | psycopg.AsyncConnection):
        _check_psycopg(driver)
    else:  # another driver (psycopg2, pg8000, ...): its flag alone
        check_in_transaction(bool(getattr(raw.dbapi_connection, "autocommit", False)), None)


def _checked_rows(
    bind: object,
    events: Iterable[Event],
    json_default: JsonDefault | None,
    *,
    asynchronous: bool,
    key_format: RecordFormat | None = None,
    value_format: RecordFormat | None = None,
) -> list[dict[str, Any]]:
    """The bind's type first (no I/O), then every event, before anything is written."""
    check_bind(bind, asynchronous=asynchronous)
    return outbox_rows(events, json_default, key_format=key_format, value_format=value_format)


def publish_many(
    bind: SyncBind,
    events: Iterable[Event],
    *,
    json_default: JsonDefault | None = None,
    key_format: RecordFormat | None = None,
    value_format: RecordFormat | None = None,
) -> int:
    """Add ``events`` to the transaction of ``bind``, in order. Returns how many.
    ``json_default``: the encoder hook of their values (:mod:`relay.publishing.json_values`);
    an event whose id you need takes one you made (``Event(..., event_id=...)``).
    ``key_format``/``value_format``: serialize every key/value of the call with a schema
    registry format (:mod:`relay.kafka.schema_formats`) instead of JSON."""
    rows = _checked_rows(
        bind,
        events,
        json_default,
        asynchronous=False,
        key_format=key_format,
        value_format=value_format,
    )
    if not rows:
        return 0
    if isinstance(bind, scoped_session):
        bind = bind()
    if isinstance(bind, Session):
        bind = bind.connection()
    if isinstance(bind, Connection):
        _check_pooled(bind.connection)
        bind.execute(INSERT_EVENT, rows)
    else:
        _check_psycopg(bind)
        with bind.cursor() as cursor:
            cursor.executemany(INSERT_EVENT_PSYCOPG, rows)
    return len(rows)


async def publish_many_async(
    bind: AsyncBind,
    events: Iterable[Event],
    *,
    json_default: JsonDefault | None = None,
    key_format: RecordFormat | None = None,
    value_format: RecordFormat | None = None,
) -> int:
    """:func:`publish_many` for asyncio: ``await relay.publish_many_async(session, events)``."""
    rows = _checked_rows(
        bind,
        events,
        json_default,
        asynchronous=True,
        key_format=key_format,
        value_format=value_format,
    )
    if not rows:
        return 0
    if isinstance(bind, async_scoped_session):
        bind = bind()
    if isinstance(bind, AsyncSession):
        bind = await bind.connection()
    if isinstance(bind, AsyncConnection):
        _check_pooled(await bind.get_raw_connection())
        await bind.execute(INSERT_EVENT, rows)
    else:
        _check_psycopg(bind)
        async with bind.cursor() as cursor:
            await cursor.executemany(INSERT_EVENT_PSYCOPG, rows)
    return len(rows)


def publish(
    bind: SyncBind,
    topic: str,
    key: KeyLike,
    value: Any,
    headers: HeadersLike | None = None,
    *,
    event_type: str | None = None,
    json_default: JsonDefault | None = None,
    key_format: RecordFormat | None = None,
    value_format: RecordFormat | None = None,
) -> uuid.UUID:
    """Add one event to the transaction of ``bind`` (see the module for what it may be);
    returns its event id, the UUIDv7 its Kafka record carries in the ``event-id`` header.

    ``key`` decides the relay partition and the Kafka partition; events of one key are
    published in the order their transactions committed. ``value`` may be bytes, None (a
    tombstone) or any JSON-serialisable object: datetime, date, time, UUID and Decimal
    are converted to text, other types by ``json_default`` (else the process-wide hook
    of ``relay.set_json_default``; see :mod:`relay.publishing.json_values`).
    ``key_format``/``value_format``: a schema registry format (Avro, Protobuf, JSON Schema:
    :mod:`relay.kafka.schema_formats`) that serializes the key/value here, in the caller's
    transaction; the outbox holds the bytes Kafka gets.
    """
    event_id = new_event_id()
    event = Event(topic, key, value, headers, event_type, event_id)
    publish_many(
        bind, [event], json_default=json_default, key_format=key_format, value_format=value_format
    )
    return event_id


async def publish_async(
    bind: AsyncBind,
    topic: str,
    key: KeyLike,
    value: Any,
    headers: HeadersLike | None = None,
    *,
    event_type: str | None = None,
    json_default: JsonDefault | None = None,
    key_format: RecordFormat | None = None,
    value_format: RecordFormat | None = None,
) -> uuid.UUID:
    """:func:`publish` for asyncio: ``await relay.publish_async(session, "orders", ...)``."""
    event_id = new_event_id()
    event = Event(topic, key, value, headers, event_type, event_id)
    await publish_many_async(
        bind, [event], json_default=json_default, key_format=key_format, value_format=value_format
    )
    return event_id
