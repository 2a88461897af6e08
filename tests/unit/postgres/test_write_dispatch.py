"""The write API's type dispatch, with no database: what each variant takes, the error that
names the other variant, the autocommit rule, and one statement for every adapter."""

from __future__ import annotations

import asyncio
import re

import pytest
from psycopg import pq
from sqlalchemy.ext.asyncio import AsyncSession, async_scoped_session, async_sessionmaker
from sqlalchemy.orm import Session, scoped_session, sessionmaker

import relay
from relay.postgres.outbox_writer import (
    INSERT_EVENT,
    INSERT_EVENT_PSYCOPG,
    check_bind,
    check_in_transaction,
)
from relay.publishing.events import outbox_row


def test_each_variant_takes_its_own_kinds() -> None:
    check_bind(Session(), asynchronous=False)
    check_bind(scoped_session(sessionmaker()), asynchronous=False)
    check_bind(AsyncSession(), asynchronous=True)
    check_bind(async_scoped_session(async_sessionmaker(), scopefunc=object), asynchronous=True)


def test_the_sync_api_names_the_async_one_for_an_async_session() -> None:
    with pytest.raises(relay.UnsupportedBindError) as error:
        relay.publish(AsyncSession(), "orders", "k", 1)  # type: ignore[arg-type]
    assert isinstance(error.value, TypeError)
    assert str(error.value) == (
        "AsyncSession is asynchronous: use await relay.publish_async / "
        "relay.publish_many_async, not relay.publish / relay.publish_many"
    )


def test_the_async_api_names_the_sync_one_for_a_session() -> None:
    with pytest.raises(relay.UnsupportedBindError, match=r"^Session is synchronous: use relay\."):
        asyncio.run(relay.publish_async(Session(), "orders", "k", 1))  # type: ignore[arg-type]
    with pytest.raises(relay.UnsupportedBindError, match=r"^scoped_session is synchronous"):
        asyncio.run(relay.publish_many_async(scoped_session(sessionmaker()), []))  # type: ignore[arg-type]


@pytest.mark.parametrize("bind", [object(), "postgresql://db", None])
def test_an_unknown_bind_is_refused_with_what_is_taken(bind: object) -> None:
    with pytest.raises(relay.UnsupportedBindError, match="Session, scoped_session or Connection"):
        relay.publish_many(bind, [])  # type: ignore[arg-type]
    with pytest.raises(relay.UnsupportedBindError, match=r"psycopg\.AsyncConnection, not"):
        asyncio.run(relay.publish_many_async(bind, []))  # type: ignore[arg-type]


def test_events_are_checked_before_the_session_is_used() -> None:
    """An unbound Session raises as soon as it is asked for a connection."""
    with pytest.raises(relay.InvalidEventError, match="invalid Kafka topic name"):
        relay.publish(Session(), "bad topic!", "k", 1)
    with pytest.raises(relay.InvalidEventError, match="JSON-serialisable"):
        asyncio.run(relay.publish_async(AsyncSession(), "orders", "k", {1, 2}))
    assert relay.publish_many(Session(), []) == 0
    assert asyncio.run(relay.publish_many_async(AsyncSession(), [])) == 0


@pytest.mark.parametrize(
    ("autocommit", "status", "refused"),
    [
        (False, pq.TransactionStatus.IDLE, False),  # the driver opens a transaction
        (False, pq.TransactionStatus.INTRANS, False),
        (True, pq.TransactionStatus.INTRANS, False),  # psycopg's conn.transaction()
        (True, pq.TransactionStatus.IDLE, True),
        (True, None, True),  # a driver that does not tell: its autocommit flag decides
    ],
)
def test_autocommit_is_refused_outside_a_transaction(
    autocommit: bool, status: int | None, refused: bool
) -> None:
    if refused:
        with pytest.raises(relay.UnsupportedBindError, match="autocommit mode"):
            check_in_transaction(autocommit, status)
    else:
        check_in_transaction(autocommit, status)


def test_every_adapter_runs_one_statement_with_the_parameters_of_an_event() -> None:
    parameters = set(outbox_row(relay.Event("orders", "k", 1)))
    assert set(INSERT_EVENT.compile().params) == parameters
    assert set(re.findall(r"%\((\w+)\)s", INSERT_EVENT_PSYCOPG)) == parameters
    assert re.sub(r"%\((\w+)\)s", r":\1", INSERT_EVENT_PSYCOPG) == INSERT_EVENT.text
