"""Alembic from Python: upgrade, downgrade, and the start-up check of the schema revision.

Where the migrations are: the repository keeps them in the top-level ``migrations/``; the
wheel carries the same files as ``relay/postgres/_migrations`` (pyproject.toml maps one to
the other), so an installed package needs neither the source tree nor ``alembic.ini``:
:func:`alembic_config` builds Alembic's configuration in code.

Our own version table, ``relay_alembic_version``: a service's own Alembic history keeps
``alembic_version`` to itself. A database migrated before that has our revision in
``alembic_version``; every Alembic run of ours (``relay db upgrade``, ``alembic`` by hand)
first moves it (:func:`adopt_legacy_revision`: only a row that is one of our revision ids
is deleted, the table and a service's rows stay), and the start-up check reads it there
until then.

Compatibility, ``relay_schema_compat`` (one row, written in the same transaction as each
migration step by :func:`record_compatibility`): the database's revision and the oldest
revision whose relays still run on that schema, which a migration declares as
``oldest_compatible = "<revision>"`` (none: only relays that know the migration). A relay
whose package is older than the database starts when the database names one of its
revisions (docs/operations.md, "Upgrading while relays run").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, inspect, text

from relay.errors import ConfigurationError, MigrationsNotAppliedError
from relay.postgres.engine import Database, opened
from relay.postgres.revision_files import read_revisions
from relay.runtime.secrets import Secret

if TYPE_CHECKING:  # Alembic is imported where it runs: the start-up check needs none of it
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext, MigrationInfo
    from alembic.script import ScriptDirectory

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The wheel's copy first; then the source tree's (a checkout, an editable install).
MIGRATION_DIRS = (Path(__file__).with_name("_migrations"), PROJECT_ROOT / "migrations")
FIRST_REVISION_FILE = "versions/0001_outbox.py"

VERSION_TABLE = "relay_alembic_version"
LEGACY_VERSION_TABLE = "alembic_version"
COMPAT_TABLE = "relay_schema_compat"
_CREATE_COMPAT_TABLE = f"""CREATE TABLE IF NOT EXISTS {COMPAT_TABLE} (
    revision varchar(32) PRIMARY KEY,
    oldest_compatible varchar(32) NOT NULL
)"""


def script_location() -> Path:
    """The relay's migrations: env.py and versions/, with our first revision."""
    for candidate in MIGRATION_DIRS:
        if (candidate / "env.py").is_file() and (candidate / FIRST_REVISION_FILE).is_file():
            return candidate
    raise ConfigurationError(
        f"migrations not found: none of {', '.join(map(str, MIGRATION_DIRS))} "
        f"has env.py and {FIRST_REVISION_FILE}"
    )


def alembic_config(url: Secret | None = None) -> Config:
    """Alembic's configuration for the relay's migrations, without an ini file."""
    from alembic.config import Config

    config = Config()
    # ConfigParser interpolation treats % specially.
    config.set_main_option("script_location", str(script_location()).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.reveal().replace("%", "%%"))
    return config


def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def _revisions(scripts: ScriptDirectory) -> set[str]:
    return {script.revision for script in scripts.walk_revisions()}


def head_revision() -> str:
    head = _scripts().get_current_head()
    if head is None:
        raise ConfigurationError("no migrations found")
    return head


@dataclass(frozen=True, slots=True)
class SchemaRevision:
    """The database's schema revision, seen from this package's migrations."""

    current: str | None  # None: no migration applied
    head: str  # this package's newest revision
    newer: bool  # ``current`` is not one of this package's revisions (a later release's)
    oldest_compatible: str | None  # newer: what relay_schema_compat says, if anything
    compatible: bool  # newer: ``oldest_compatible`` is one of this package's revisions

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head

    def state(self) -> str:
        """The revision's state in a few words, as `relay db current` shows it."""
        if self.up_to_date:
            return "up to date"
        if not self.newer:
            return f"needs upgrade to {self.head}"
        if self.compatible:
            return f"newer than {self.head}; runs relays of {self.oldest_compatible} or later"
        return f"newer than {self.head} and not compatible with it: upgrade the relay"

    def problem(self) -> str | None:
        """Why a relay of this package may not run on the schema; None when it may."""
        if self.up_to_date or self.compatible:
            return None
        if not self.newer:
            shown = self.current or "empty (no migrations applied)"
            return (
                f"database schema is at {shown}, this relay needs {self.head}: "
                "run `relay db upgrade`"
            )
        says = (
            f"runs only relays of {self.oldest_compatible} or later"
            if self.oldest_compatible
            else "does not say that older relays run on it"
        )
        return (
            f"database schema is at {self.current}, newer than this relay's {self.head}, "
            f"and {says}: upgrade the relay"
        )


def schema_revision(database: Database) -> SchemaRevision:
    found = read_revisions(script_location() / "versions")
    if found is None:
        scripts = _scripts()
        ours, current_head = _revisions(scripts), scripts.get_current_head()
        if current_head is None:
            raise ConfigurationError("no migrations found")
        found = ours, current_head
    ours, head = found
    with database.connect("reading the schema revision") as conn:
        current = _current_revision(conn, ours)
        newer = current is not None and current not in ours
        oldest = _oldest_compatible_recorded(conn, current) if newer else None
    return SchemaRevision(current, head, newer, oldest, newer and oldest in ours)


def current_revision(database: Database) -> str | None:
    return schema_revision(database).current


def check_schema(database: Database) -> None:
    """Fail fast unless a relay of this package may run on the database's schema: at this
    package's head, or at a later release's revision that names one of ours as compatible."""
    revision = schema_revision(database)
    problem = revision.problem()
    if problem is not None:
        raise MigrationsNotAppliedError(problem)
    if revision.newer:
        log.info(
            "database schema %s is newer than this relay's %s; it runs relays of %s or later",
            revision.current,
            revision.head,
            revision.oldest_compatible,
        )


def upgrade(url: Secret, revision: str = "head") -> None:
    from alembic import command

    with _migrating(url) as database:
        if revision == "head" and _already_newer(database):
            return
        _run_alembic(database, "upgrading the schema", command.upgrade, revision)


def downgrade(url: Secret, revision: str) -> None:
    from alembic import command

    with _migrating(url) as database:
        _run_alembic(database, "downgrading the schema", command.downgrade, revision)


def _migrating(url: Secret) -> AbstractContextManager[Database]:
    """The database for one Alembic run, from the one engine factory."""
    return opened(url, pooled=False, application_name="relay-migrations")


def _run_alembic(
    database: Database, doing: str, run: Callable[[Config, str], None], revision: str
) -> None:
    """Alembic's ``run`` (upgrade, downgrade) on a connection of ``database``: env.py
    takes it from the configuration's attributes and builds no engine of its own."""
    config = alembic_config()
    with database.connect(doing) as connection, _alembic_errors(doing):
        config.attributes["connection"] = connection
        run(config, revision)


def _already_newer(database: Database) -> bool:
    """True when a later release has migrated the database to a schema compatible with
    this package (``relay db upgrade`` has nothing to do); raises when it is not."""
    revision = schema_revision(database)
    if not revision.newer:
        return False
    problem = revision.problem()
    if problem is not None:
        raise MigrationsNotAppliedError(problem)
    log.info(
        "database schema %s is newer than %s: nothing to upgrade", revision.current, revision.head
    )
    return True


@contextmanager
def _alembic_errors(doing: str) -> Iterator[None]:
    """Alembic's refusals (an unknown revision, several heads) as one clear line."""
    from alembic.util import CommandError

    try:
        yield
    except CommandError as exc:
        raise ConfigurationError(f"{doing} failed: {exc}") from None


# What env.py runs, on every Alembic run of ours.


def adopt_legacy_revision(connection: Connection, scripts: ScriptDirectory) -> str | None:
    """Move our revision from ``alembic_version`` (before our own version table) to
    ``relay_alembic_version``, in one transaction, and create ``relay_schema_compat``.
    Only a row that is one of our revision ids is deleted; the table stays, with a
    service's own revision. Returns the revision moved, if any."""
    from alembic.runtime.migration import MigrationContext

    with _transaction(connection):
        connection.execute(text(_CREATE_COMPAT_TABLE))
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        if context.get_current_revision() is not None:
            return None
        legacy = _legacy_revision(connection, _revisions(scripts))
        if legacy is None:
            return None
        context.stamp(scripts, legacy)
        connection.execute(
            text(f"DELETE FROM {LEGACY_VERSION_TABLE} WHERE version_num = :revision"),
            {"revision": legacy},
        )
    log.info("schema revision %s moved from %s to %s", legacy, LEGACY_VERSION_TABLE, VERSION_TABLE)
    return legacy


def record_compatibility(
    *, ctx: MigrationContext, step: MigrationInfo, heads: set[str], run_args: dict[str, Any]
) -> None:
    """Alembic's ``on_version_apply`` hook: ``relay_schema_compat`` follows the revision,
    in the transaction of the migration step (online), or in the script (``--sql``)."""
    if ctx.script is None:
        raise ConfigurationError("migrations run without their script directory")
    ctx.execute(_CREATE_COMPAT_TABLE)
    ctx.execute(f"DELETE FROM {COMPAT_TABLE}")
    for head in heads:  # at most one: our history has no branches
        oldest = oldest_compatible(ctx.script, head)
        ctx.execute(
            text(
                f"INSERT INTO {COMPAT_TABLE} (revision, oldest_compatible) VALUES (:r, :o)"
            ).bindparams(r=head, o=oldest)
        )


def oldest_compatible(scripts: ScriptDirectory, revision: str) -> str:
    """The oldest revision whose relays run on ``revision``'s schema: what its migration
    declares (``oldest_compatible``), else the revision itself."""
    script = scripts.get_revision(revision)
    if script is None:
        raise ConfigurationError(f"unknown schema revision {revision}")
    declared = getattr(script.module, "oldest_compatible", None)
    if declared is None:
        return revision
    earlier = {s.revision for s in scripts.iterate_revisions(revision, "base")}
    if declared not in earlier:
        raise ConfigurationError(
            f"migration {revision}: oldest_compatible {declared!r} is not this revision "
            "or one before it"
        )
    return str(declared)


def _current_revision(conn: Connection, ours: set[str]) -> str | None:
    current = None
    if inspect(conn).has_table(VERSION_TABLE):
        rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
        if len(rows) > 1:  # Alembic's own refusal (several heads), as before
            from alembic.runtime.migration import MigrationContext

            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            context.get_current_revision()
        current = str(rows[0]) if rows else None
    return current if current is not None else _legacy_revision(conn, ours)


def _legacy_revision(conn: Connection, ours: set[str]) -> str | None:
    """Our revision in ``alembic_version``, where releases before our own version table
    kept it (beside a service's own revision, perhaps)."""
    if not inspect(conn).has_table(LEGACY_VERSION_TABLE):
        return None
    rows = conn.execute(text(f"SELECT version_num FROM {LEGACY_VERSION_TABLE}")).scalars()
    found = sorted(set(rows) & ours)
    if len(found) > 1:
        raise ConfigurationError(
            f"{LEGACY_VERSION_TABLE} holds several of the relay's revisions "
            f"({', '.join(found)}): delete all but the one the schema is at"
        )
    return found[0] if found else None


def _oldest_compatible_recorded(conn: Connection, current: str | None) -> str | None:
    if not inspect(conn).has_table(COMPAT_TABLE):
        return None
    row = conn.execute(
        text(f"SELECT oldest_compatible FROM {COMPAT_TABLE} WHERE revision = :r"),
        {"r": current},
    ).scalar_one_or_none()
    return None if row is None else str(row)


@contextmanager
def _transaction(connection: Connection) -> Iterator[None]:
    """A transaction of its own, or a savepoint inside the caller's."""
    if connection.in_transaction():
        with connection.begin_nested():
            yield
    else:
        with connection.begin():
            yield
