"""Scratch databases on a development or test server: dropping them reliably."""

from __future__ import annotations

import time

import psycopg
from psycopg import sql


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
