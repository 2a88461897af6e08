"""``relay db``: the outbox schema (Alembic migrations) and the least-privilege roles."""

from __future__ import annotations

from collections.abc import Sequence

from relay.postgres import migrations
from relay.postgres.engine import open_database
from relay.postgres.migrations import SchemaRevision
from relay.postgres.outbox_partitions import CountChange, change_partition_count
from relay.postgres.roles import grant_roles
from relay.runtime.secrets import Secret


def upgrade(url: Secret, revision: str = "head") -> None:
    migrations.upgrade(url, revision)


def downgrade(url: Secret, revision: str) -> None:
    migrations.downgrade(url, revision)


def current(url: Secret) -> SchemaRevision:
    """The database's schema revision against this package's migrations."""
    database = open_database(url, pool_size=1)
    try:
        return migrations.schema_revision(database)
    finally:
        database.dispose()


def roles(url: Secret, mirror_tables: Sequence[str] = ()) -> None:
    """Create outbox_writer, outbox_relay and outbox_mirror if missing and grant them what
    they need (``mirror_tables``: the tables outbox_mirror may also write)."""
    database = open_database(url, pool_size=1)
    try:
        grant_roles(database, mirror_tables)
    finally:
        database.dispose()


def set_partitions(url: Secret, partitions: int) -> CountChange:
    """Change the relay partition count. Raising it on a live outbox keeps per-key order
    (rows above the returned barrier wait for every row up to it); lowering it is refused
    (a DatabaseError) while committed rows wait to be published. Sharing `relay run`
    processes notice within seconds and grow the positions topic to match."""
    database = open_database(url, pool_size=1)
    try:
        return change_partition_count(database, partitions)
    finally:
        database.dispose()
