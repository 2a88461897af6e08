"""I1 for every stack the write API takes, and for the documented plain INSERT.

Each stack writes a business row and an event, then (before ending its transaction) the
event must be visible to the caller and invisible to a second connection; after a commit
both rows are there, after a rollback neither. A write through any other connection or
transaction than the caller's fails one of the three checks.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker
from sqlalchemy.pool import NullPool

import relay
from relay.postgres.outbox_writer import AsyncBind, SyncBind
from relay.publishing.events import decode_headers
from tests.integration.support import draw, migrate, run_sql

Row = tuple[Any, ...]
Stack = Callable[[str, Callable[[], None], bool], list[Row]]

VALUE = {"id": 7, "total": 99}
HEADERS: dict[str, str | bytes] = {"trace": "abc", "bin": b"\x00\xff"}
EXPECTED = (
    "orders",
    b"order-7",
    b'{"id":7,"total":99}',
    "OrderPlaced",
    [["trace", "YWJj"], ["bin", "AP8="]],
)
BUSINESS_ROW = "INSERT INTO orders (id, total) VALUES (7, 99) RETURNING id"
EVENT_ROWS = "SELECT topic, key, value, event_type, headers FROM outbox ORDER BY id"
# The plain INSERT of README.md ("Writing events"), for writers without the Python API.
PLAIN_INSERT = """
    INSERT INTO outbox (topic, key, value, event_type, headers)
    VALUES ('orders', convert_to('order-7', 'UTF8'), convert_to('{"id":7,"total":99}', 'UTF8'),
            'OrderPlaced', '[["trace", "YWJj"], ["bin", "AP8="]]')
"""


def own_headers(rows: list[Row], plain: bool) -> list[Row]:
    """``rows`` without the event id the write API stores first in the headers, checked:
    a UUIDv7 (a plain INSERT stores none)."""
    kept: list[Row] = []
    for *columns, stored in rows:
        headers = stored
        if not plain:
            (name, value), *headers = stored
            assert name == "event-id"
            assert uuid.UUID(base64.b64decode(value).decode()).version == 7
        assert all(name != "event-id" for name, _ in headers)
        kept.append((*columns, headers))
    return kept


def libpq(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def sa_rows(result: sa.Result[Any]) -> list[Row]:
    return [tuple(r) for r in result]


def through(
    bind: SyncBind, run: Callable[[str], list[Row]], while_open: Callable[[], None], commit: bool
) -> list[Row]:
    """Business row and event in one transaction of ``bind``; the event rows it saw."""
    run(BUSINESS_ROW)
    relay.publish(bind, "orders", "order-7", VALUE, HEADERS, event_type="OrderPlaced")
    seen = run(EVENT_ROWS)
    while_open()
    if commit:
        bind.commit()
    else:
        bind.rollback()
    return seen


async def through_async(
    bind: AsyncBind,
    run: Callable[[str], Awaitable[list[Row]]],
    while_open: Callable[[], None],
    commit: bool,
) -> list[Row]:
    await run(BUSINESS_ROW)
    await relay.publish_async(bind, "orders", "order-7", VALUE, HEADERS, event_type="OrderPlaced")
    seen = await run(EVENT_ROWS)
    while_open()
    if commit:
        await bind.commit()
    else:
        await bind.rollback()
    return seen


def via_session(url: str, while_open: Callable[[], None], commit: bool) -> list[Row]:
    engine = sa.create_engine(url, poolclass=NullPool)
    with Session(engine) as session:
        return through(session, lambda q: sa_rows(session.execute(sa.text(q))), while_open, commit)


def via_scoped_session(url: str, while_open: Callable[[], None], commit: bool) -> list[Row]:
    """Flask-SQLAlchemy's ``db.session`` is a scoped_session."""
    registry = scoped_session(sessionmaker(sa.create_engine(url, poolclass=NullPool)))
    try:
        return through(
            registry, lambda q: sa_rows(registry.execute(sa.text(q))), while_open, commit
        )
    finally:
        registry.remove()


def via_connection(url: str, while_open: Callable[[], None], commit: bool) -> list[Row]:
    with sa.create_engine(url, poolclass=NullPool).connect() as conn:
        return through(conn, lambda q: sa_rows(conn.execute(sa.text(q))), while_open, commit)


def via_psycopg(url: str, while_open: Callable[[], None], commit: bool) -> list[Row]:
    with psycopg.connect(libpq(url)) as conn:
        return through(conn, lambda q: conn.execute(q).fetchall(), while_open, commit)


def via_async_sqlalchemy(
    open_bind: Callable[[AsyncEngine], AsyncSession | AsyncConnection],
) -> Stack:
    """An AsyncSession or AsyncConnection of ``create_async_engine("postgresql+psycopg://")``."""

    def stack(url: str, while_open: Callable[[], None], commit: bool) -> list[Row]:
        async def run() -> list[Row]:
            engine = create_async_engine(url, poolclass=NullPool)
            try:
                async with open_bind(engine) as bind:

                    async def query(q: str) -> list[Row]:
                        return sa_rows(await bind.execute(sa.text(q)))

                    return await through_async(bind, query, while_open, commit)
            finally:
                await engine.dispose()

        return asyncio.run(run())

    return stack


def via_psycopg_async(url: str, while_open: Callable[[], None], commit: bool) -> list[Row]:
    async def run() -> list[Row]:
        async with await psycopg.AsyncConnection.connect(libpq(url)) as conn:

            async def query(q: str) -> list[Row]:
                return await (await conn.execute(q)).fetchall()

            return await through_async(conn, query, while_open, commit)

    return asyncio.run(run())


def via_plain_sql(url: str, while_open: Callable[[], None], commit: bool) -> list[Row]:
    with psycopg.connect(libpq(url)) as conn:
        conn.execute(BUSINESS_ROW)
        conn.execute(PLAIN_INSERT)
        seen = conn.execute(EVENT_ROWS).fetchall()
        while_open()
        if commit:
            conn.commit()
        else:
            conn.rollback()
        return seen


STACKS: dict[str, Stack] = {
    "session": via_session,
    "scoped_session": via_scoped_session,
    "connection": via_connection,
    "psycopg": via_psycopg,
    "async_session": via_async_sqlalchemy(AsyncSession),
    "async_connection": via_async_sqlalchemy(lambda engine: engine.connect()),
    "psycopg_async": via_psycopg_async,
    "plain_sql": via_plain_sql,
}


@pytest.fixture
def database(database_url: str) -> str:
    """A fresh migrated database with a business table."""
    migrate(database_url, 4)
    run_sql(database_url, "CREATE TABLE orders (id integer PRIMARY KEY, total integer NOT NULL)")
    return database_url


def committed(other: psycopg.Connection[Any]) -> tuple[list[Row], list[Row]]:
    """The orders and events a second connection sees."""
    orders = other.execute(b"SELECT id FROM orders").fetchall()
    return orders, other.execute(EVENT_ROWS).fetchall()


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
@pytest.mark.parametrize("stack", list(STACKS.values()), ids=list(STACKS))
def test_the_event_commits_and_rolls_back_with_the_business_row(
    database: str, stack: Stack, commit: bool
) -> None:
    plain = stack is via_plain_sql
    with psycopg.connect(libpq(database), autocommit=True) as other:
        looked: list[tuple[list[Row], list[Row]]] = []
        seen = stack(database, lambda: looked.append(committed(other)), commit)
        after = committed(other)
    assert own_headers(seen, plain) == [EXPECTED]  # the caller's transaction holds it...
    assert looked == [([], [])]  # ...which nobody else sees before it ends
    assert (after[0], own_headers(after[1], plain)) == (
        ([(7,)], [EXPECTED]) if commit else ([], [])
    )
    if commit:
        assert after[1] == seen  # the same event id
        assert decode_headers(after[1][0][4])[-2:] == (("trace", b"abc"), ("bin", b"\x00\xff"))
        draw(database)
        sequenced = run_sql(database, "SELECT count(*) FROM outbox_positions")
        assert sequenced == [(1,)]


def test_a_connection_in_autocommit_mode_is_refused(database: str) -> None:
    with psycopg.connect(libpq(database), autocommit=True) as conn:
        with pytest.raises(relay.UnsupportedBindError, match="autocommit mode"):
            relay.publish(conn, "orders", "k", 1)
        with conn.transaction():  # an explicit transaction makes the write atomic again
            relay.publish(conn, "orders", "k", 2)
    engine = sa.create_engine(database, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn, pytest.raises(relay.UnsupportedBindError, match="AUTOCOMMIT"):
        relay.publish(conn, "orders", "k", 3)
    with Session(engine) as session, pytest.raises(relay.UnsupportedBindError):
        relay.publish(session, "orders", "k", 4)
    engine = sa.create_engine(database, poolclass=NullPool)
    with engine.connect() as conn, pytest.raises(relay.UnsupportedBindError):
        relay.publish(conn.execution_options(isolation_level="AUTOCOMMIT"), "orders", "k", 5)
    assert run_sql(database, "SELECT value FROM outbox") == [(b"2",)]


def test_an_async_connection_in_autocommit_mode_is_refused(database: str) -> None:
    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(libpq(database), autocommit=True) as conn:
            with pytest.raises(relay.UnsupportedBindError, match="autocommit mode"):
                await relay.publish_async(conn, "orders", "k", 1)
            async with conn.transaction():
                await relay.publish_async(conn, "orders", "k", 2)
        engine = create_async_engine(database, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as aconn:
                with pytest.raises(relay.UnsupportedBindError, match="AUTOCOMMIT"):
                    await relay.publish_async(aconn, "orders", "k", 3)
            async with AsyncSession(engine) as session:
                with pytest.raises(relay.UnsupportedBindError):
                    await relay.publish_async(session, "orders", "k", 4)
        finally:
            await engine.dispose()

    asyncio.run(run())
    assert run_sql(database, "SELECT value FROM outbox") == [(b"2",)]


def test_the_wrong_variant_names_the_right_one(database: str) -> None:
    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(libpq(database)) as conn:
            with pytest.raises(relay.UnsupportedBindError, match=r"use await relay\.publish_async"):
                relay.publish(conn, "orders", "k", 1)  # type: ignore[arg-type]

    asyncio.run(run())
    with psycopg.connect(libpq(database)) as conn:
        with pytest.raises(TypeError, match=r"use relay\.publish / relay\.publish_many"):
            asyncio.run(relay.publish_async(conn, "orders", "k", 1))  # type: ignore[arg-type]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
