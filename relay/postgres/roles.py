"""Least-privilege database roles (`relay db roles`), from roles.sql."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import text

from relay.errors import ConfigurationError
from relay.postgres.engine import Database

ROLES_SQL = Path(__file__).with_name("roles.sql")
MIRROR_ROLE = "outbox_mirror"


def grant_roles(database: Database, mirror_tables: Sequence[str] = ()) -> None:
    """Create the roles if missing and grant them what they need, in one transaction."""
    script = ROLES_SQL.read_text(encoding="utf-8")
    with database.begin("granting the relay's roles") as conn:
        dbapi = conn.connection.dbapi_connection
        if dbapi is None:
            raise RuntimeError("no database connection")
        cursor = dbapi.cursor()
        try:  # no parameters: the script's % signs stay as they are
            cursor.execute(script)
        finally:
            cursor.close()
        for table in mirror_tables:
            exists = conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": table})
            if not exists.scalar_one():
                raise ConfigurationError(f"mirrored table {table!r} does not exist")
            quoted = conn.dialect.identifier_preparer.quote(table)
            conn.exec_driver_sql(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON {quoted} TO {MIRROR_ROLE}"
            )
