"""Alembic environment for the relay's tables (outbox, settings, mirror bookkeeping).

`relay db upgrade` builds its configuration in code (relay/postgres/migrations.py, no ini
file) and hands its connection over; `alembic -c alembic.ini ...` by hand works too, with
``sqlalchemy.url`` or ``RELAY_DATABASE_URL`` read as every command reads it
(relay.settings) and an engine from the one engine factory (relay.postgres.engine: its
connect timeout and application_name). Either way our revision lives in our
own version table, relay_alembic_version (a service's Alembic keeps alembic_version), a
revision that older releases kept in alembic_version is moved there first, and
relay_schema_compat follows each step (which older relays may run on the schema).
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection

from relay.errors import ConfigurationError
from relay.postgres.engine import opened
from relay.postgres.migrations import VERSION_TABLE, adopt_legacy_revision, record_compatibility
from relay.runtime.secrets import Secret
from relay.settings.connections import database_url, load_database_url
from relay.settings.spec import Invalid

config = context.config


def _database_url() -> Secret:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        return load_database_url()  # RELAY_DATABASE_URL
    try:
        return database_url(url)
    except Invalid as exc:
        raise ConfigurationError(f"sqlalchemy.url {exc}") from None


def _configure(**options: Any) -> None:
    context.configure(
        transaction_per_migration=True,
        version_table=VERSION_TABLE,
        on_version_apply=record_compatibility,
        **options,
    )


def run_migrations_offline() -> None:
    _configure(url=_database_url().reveal(), literal_binds=True)
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
    with (
        opened(_database_url(), pooled=False, application_name="relay-migrations") as database,
        database.connect("migrating") as connection,
    ):
        _run_on(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
