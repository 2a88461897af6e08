"""Alembic from Python: upgrade, downgrade, and the start-up check that the schema is current."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from relay.errors import ConfigurationError, MigrationsNotAppliedError
from relay.postgres.engine import database_errors
from relay.runtime.secrets import Secret

PROJECT_ROOT = Path(__file__).resolve().parents[2]
ALEMBIC_INI = PROJECT_ROOT / "alembic.ini"


def alembic_config(url: Secret) -> Config:
    if not ALEMBIC_INI.exists():
        raise ConfigurationError(f"migrations not found: {ALEMBIC_INI} is missing")
    config = Config(str(ALEMBIC_INI))
    # ConfigParser interpolation treats % specially.
    config.set_main_option("sqlalchemy.url", url.reveal().replace("%", "%%"))
    return config


def head_revision(url: Secret) -> str:
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    if head is None:
        raise ConfigurationError("no migrations found")
    return head


def current_revision(engine: Engine, url: Secret) -> str | None:
    with database_errors(url, "reading the schema revision"), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(url: Secret, revision: str = "head") -> None:
    with database_errors(url, "upgrading the schema"):
        command.upgrade(alembic_config(url), revision)


def downgrade(url: Secret, revision: str) -> None:
    with database_errors(url, "downgrading the schema"):
        command.downgrade(alembic_config(url), revision)


def check_schema(engine: Engine, url: Secret) -> None:
    """Fail fast when the relay's migrations are not applied."""
    current = current_revision(engine, url)
    head = head_revision(url)
    if current != head:
        shown = current or "empty (no migrations applied)"
        raise MigrationsNotAppliedError(
            f"database schema is at {shown}, this relay needs {head}: run `relay db upgrade`"
        )
