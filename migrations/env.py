"""Alembic environment for the relay's tables (outbox, settings, mirror bookkeeping).

`relay db upgrade` builds its configuration in code (relay/postgres/migrations.py, no ini
file); `alembic -c alembic.ini ...` by hand works too. Either way our revision lives in our
own version table, relay_alembic_version (a service's Alembic keeps alembic_version), a
revision that older releases kept in alembic_version is moved there first, and
relay_schema_compat follows each step (which older relays may run on the schema).
"""

from __future__ import annotations

import os
from typing import Any

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from relay.postgres.migrations import VERSION_TABLE, adopt_legacy_revision, record_compatibility

config = context.config


def _database_url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("RELAY_DATABASE_URL")
    if not url:
        raise RuntimeError("no database: set RELAY_DATABASE_URL")
    return url


def _configure(**options: Any) -> None:
    context.configure(
        transaction_per_migration=True,
        version_table=VERSION_TABLE,
        on_version_apply=record_compatibility,
        **options,
    )


def run_migrations_offline() -> None:
    _configure(url=_database_url(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    adopt_legacy_revision(connection, context.script)
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        _run_on(connectable)
        return
    engine = create_engine(_database_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _run_on(connection)
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
