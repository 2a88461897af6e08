"""The one engine factory, the database handle built on it, and the translation of driver
errors into the relay's exception tree."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from relay.errors import DatabaseError, DatabaseUnreachableError, RetriableError
from relay.runtime.secrets import Secret, mask_text, mask_url


def make_engine(
    url: Secret,
    pool_size: int = 5,
    *,
    application_name: str = "outbox-relay",
    idle_transaction_timeout_s: float | None = None,
    pooled: bool = True,
    pre_ping: bool = True,
) -> Engine:
    """The one engine factory: a 10 s connect timeout, ``application_name`` shown in
    pg_stat_activity, and ``pooled=False`` for a connection per checkout (NullPool, for
    short-lived Spark tasks and one-shot commands).

    With ``idle_transaction_timeout_s`` the server ends a session that sits idle inside a
    transaction that long (a paused or hung mirror must not hold its offset row lock for
    ever)."""
    connect_args: dict[str, object] = {"connect_timeout": 10, "application_name": application_name}
    if idle_transaction_timeout_s is not None:
        timeout_ms = int(idle_transaction_timeout_s * 1000)
        connect_args["options"] = f"-c idle_in_transaction_session_timeout={timeout_ms}"
    pool: dict[str, object] = (
        {"pool_size": pool_size, "max_overflow": pool_size} if pooled else {"poolclass": NullPool}
    )
    return create_engine(url.reveal(), pool_pre_ping=pre_ping, connect_args=connect_args, **pool)


@dataclass(frozen=True, slots=True)
class Database:
    """One database: an engine from :func:`make_engine` and its URL, which is kept (a
    Secret) to name the server in messages with the password masked and to mask the
    password in driver errors."""

    engine: Engine
    url: Secret

    @property
    def where(self) -> str:
        """The URL with its password masked, safe to print."""
        return mask_url(self.url.reveal())

    def errors(self, doing: str, retriable: bool = False) -> AbstractContextManager[None]:
        """:func:`database_errors` for this database."""
        return database_errors(self.url, doing, retriable)

    @contextmanager
    def connect(self, doing: str, retriable: bool = False) -> Iterator[Connection]:
        """A connection, driver errors translated (``doing``: what failed, if it does)."""
        with self.errors(doing, retriable), self.engine.connect() as connection:
            yield connection

    @contextmanager
    def begin(self, doing: str, retriable: bool = False) -> Iterator[Connection]:
        """A connection in a transaction that commits at the end of the block."""
        with self.errors(doing, retriable), self.engine.begin() as connection:
            yield connection

    def dispose(self) -> None:
        self.engine.dispose()


def open_database(url: Secret, pool_size: int = 5, **options: Any) -> Database:
    """A :class:`Database` whose engine is :func:`make_engine`'s (same ``options``)."""
    return Database(make_engine(url, pool_size, **options), url)


@contextmanager
def opened(url: Secret, pool_size: int = 5, **options: Any) -> Iterator[Database]:
    """:func:`open_database` for the block, its engine disposed of at the end."""
    database = open_database(url, pool_size, **options)
    try:
        yield database
    finally:
        database.dispose()


@dataclass(frozen=True, slots=True)
class DriverMessage:
    """The server's SQLSTATE (if any) and the first line of a driver error's message."""

    sqlstate: str | None
    first_line: str

    @property
    def code(self) -> str:
        return f" [SQLSTATE {self.sqlstate}]" if self.sqlstate else ""


def driver_message(exc: SQLAlchemyError) -> DriverMessage:
    orig = getattr(exc, "orig", None)
    lines = str(orig if orig is not None else exc).strip().splitlines()
    return DriverMessage(getattr(orig, "sqlstate", None), (lines or ["?"])[0])


def translate(exc: SQLAlchemyError, url: Secret, doing: str) -> DatabaseError:
    """One clear, password-free message with the server's SQLSTATE."""
    message = driver_message(exc)
    sqlstate = message.sqlstate
    detail = mask_text(message.first_line, secrets=_password(url))
    where = mask_url(url.reveal())
    if isinstance(exc, OperationalError) and sqlstate in (None, "08001", "08006", "57P03"):
        return DatabaseUnreachableError(
            f"cannot connect to PostgreSQL at {where}: {detail}", sqlstate
        )
    return DatabaseError(f"{doing} failed{message.code}: {detail}", sqlstate)


def _password(url: Secret) -> tuple[str, ...]:
    """The password to mask in driver messages. Not when it is also the URL's user,
    database or host name: those appear in messages (``user "relay"``) and masking them
    would only garble what is shown anyway."""
    parsed = make_url(url.reveal())
    password = parsed.password
    if not password or password in (parsed.username, parsed.database, parsed.host):
        return ()
    return (str(password),)


# Connection loss, transaction rollback (serialization, deadlock), insufficient
# resources, operator intervention (server restarting), idle-in-transaction timeout.
_TRANSIENT_SQLSTATES = ("08", "40", "53", "57P", "25P03")


def is_transient(exc: DBAPIError) -> bool:
    """True when the same statement may succeed if tried again (e.g. after a restart)."""
    sqlstate = str(getattr(exc.orig, "sqlstate", None) or "")
    return (
        isinstance(exc, OperationalError | InterfaceError)
        or exc.connection_invalidated
        or sqlstate.startswith(_TRANSIENT_SQLSTATES)
    )


@contextmanager
def database_errors(url: Secret, doing: str, retriable: bool = False) -> Iterator[None]:
    """Driver errors as relay errors; with ``retriable``, transient ones (a restarting
    server, a lost connection) become RetriableError so the caller's retry policy applies."""
    try:
        yield
    except DBAPIError as exc:
        error = translate(exc, url, doing)
        if retriable and is_transient(exc):
            raise RetriableError(str(error)) from None
        raise error from None
