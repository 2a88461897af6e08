"""Scratch databases on a development or test server: created fresh (each owned by a login
role of its own where the admin role may create roles) and dropped reliably."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url


def libpq_url(url: str) -> str:
    """The same database as a libpq URL (for psycopg and the PostgreSQL tools)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def drop_database(conninfo: str, name: str, *, attempts: int = 5, pause: float = 1.0) -> None:
    """Drop database ``name`` (if it exists) through the libpq URL ``conninfo``.

    A plain DROP cancels autovacuum workers by itself but refuses while other sessions are
    connected; ``WITH (FORCE)`` ends those sessions but refuses, for a role without
    ``pg_signal_backend``, while an autovacuum worker is in the database. So both are tried,
    a few times, ``pause`` seconds apart; the last error is raised."""
    plain = sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name))
    forced = plain + sql.SQL(" WITH (FORCE)")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for attempt in range(attempts):
            for statement in (plain, forced):
                try:
                    conn.execute(statement)
                except psycopg.errors.Error:
                    if attempt == attempts - 1 and statement is forced:
                        raise
                else:
                    return
            time.sleep(pause)


@dataclass(frozen=True, slots=True)
class ScratchDatabase:
    name: str
    url: str  # SQLAlchemy URL, logging in as the database's own role when it has one
    own_role: bool


class ScratchDatabases:
    """Creates fresh, empty databases named ``<prefix>_<32 hex>`` through ``admin_url`` and
    drops them (and their roles) in :meth:`drop_all`.

    Where the admin role may create roles (always on the development server), each database
    is owned by a fresh login role of its own that its URL logs in as, so that a test that
    changes its role (``ALTER ROLE CURRENT_USER ...``) cannot break anyone else's; elsewhere
    it is owned by ``base_url``'s user."""

    __slots__ = ("_admin", "_base", "_prefix", "created")

    def __init__(self, admin_url: str, base_url: str, prefix: str = "test") -> None:
        self._admin = libpq_url(admin_url)
        self._base = make_url(base_url)
        self._prefix = prefix
        self.created: list[ScratchDatabase] = []

    def create(self) -> str:
        """A new empty database; its SQLAlchemy URL."""
        name = f"{self._prefix}_{uuid.uuid4().hex}"
        password = uuid.uuid4().hex
        with psycopg.connect(self._admin, autocommit=True) as conn:
            own_role = _create_role(conn, name, password)
            owner = name if own_role else self._base.username
            create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if owner:
                create += sql.SQL(" OWNER {}").format(sql.Identifier(owner))
            conn.execute(create)
        target = self._base.set(database=name)
        if own_role:
            target = target.set(username=name, password=password)
        url = target.render_as_string(hide_password=False)
        self.created.append(ScratchDatabase(name, url, own_role))
        return url

    def drop_all(self) -> None:
        while self.created:
            database = self.created.pop()
            drop_database(self._admin, database.name)
            if database.own_role:
                with psycopg.connect(self._admin, autocommit=True) as conn:
                    conn.execute(
                        sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(database.name))
                    )


def _create_role(conn: psycopg.Connection[tuple[object, ...]], role: str, password: str) -> bool:
    """Create a login role; False if the admin role may not create roles."""
    try:
        with conn.transaction():
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
            # PG15 needs membership to make the role own a database (and PG16+ to drop it).
            conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(role)))
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True
