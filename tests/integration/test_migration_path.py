"""A database created by the first release (revision 0001_outbox) gets every later outbox
safeguard from ``relay db upgrade``, keeps its pending rows, and can go back; one migrated
before the relay's own version table (relay_alembic_version) is adopted."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay
from relay.errors import MigrationsNotAppliedError
from relay.postgres import migrations
from relay.postgres.engine import Database
from relay.runtime.secrets import Secret
from tests.integration.support import run_sql

# The functions that need the schema owner's rights, before and after 0007_commit_markers
# (whose row trigger needs none: it reads no table).
_DEFINER_FUNCTIONS = ("outbox_assign_partition", "outbox_sequence_at_commit")
_DEFINER_FUNCTIONS_NOW = ("outbox_sequence_at_commit", "outbox_horizon")


def _definer_functions(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT proname FROM pg_proc WHERE proname = ANY(:names) AND prosecdef"
                " AND array_to_string(proconfig, ',') LIKE 'search_path=%'"
            ),
            {"names": [*_DEFINER_FUNCTIONS, *_DEFINER_FUNCTIONS_NOW]},
        )
        return {row.proname for row in rows}


def _commit_raises_synchronous_commit(engine: sa.Engine) -> bool:
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL synchronous_commit = off"))
        relay.publish(conn, "t", "k", {"n": 1})
        conn.execute(sa.text("SET CONSTRAINTS ALL IMMEDIATE"))  # fire the commit trigger now
        return bool(conn.execute(sa.text("SHOW synchronous_commit")).scalar_one() == "on")


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_a_first_release_database_upgrades_to_every_safeguard(database_url: str) -> None:
    url = Secret(database_url)
    engine = sa.create_engine(database_url, poolclass=NullPool)
    try:
        migrations.upgrade(url, "0001_outbox")
        with engine.begin() as conn:
            relay.publish(conn, "orders", "order-1", {"id": 1})
        assert "outbox_dead_letters" not in _tables(engine)
        assert _definer_functions(engine) == set()
        assert not _commit_raises_synchronous_commit(engine)

        migrations.upgrade(url)

        assert {"outbox_dead_letters", "mirror_offsets", "mirror_dead_letters"} <= _tables(engine)
        assert _definer_functions(engine) == set(_DEFINER_FUNCTIONS_NOW)
        assert _commit_raises_synchronous_commit(engine)
        with engine.connect() as conn:
            pending = conn.execute(
                sa.text("SELECT topic, position FROM outbox_positions ORDER BY id")
            ).all()
        assert [row.topic for row in pending] == ["orders", "t", "t"]
        assert len({row.position for row in pending}) == 3

        migrations.downgrade(url, "0001_outbox")

        assert "outbox_dead_letters" not in _tables(engine)
        assert _definer_functions(engine) == set()
        assert not _commit_raises_synchronous_commit(engine)
    finally:
        engine.dispose()


def _as_before_our_version_table(database_url: str, service_revision: str) -> None:
    """The database as releases before relay_alembic_version left it: our revision in
    Alembic's default table, beside a service's own revision."""
    for statement in (
        "ALTER TABLE relay_alembic_version RENAME TO alembic_version",
        "ALTER TABLE alembic_version RENAME CONSTRAINT relay_alembic_version_pkc"
        " TO alembic_version_pkc",
        "DROP TABLE relay_schema_compat",
        f"INSERT INTO alembic_version VALUES ('{service_revision}')",
    ):
        run_sql(database_url, statement)


def _versions(database_url: str, table: str) -> list[str]:
    return sorted(str(row[0]) for row in run_sql(database_url, f"SELECT * FROM {table}"))


def test_a_database_migrated_before_our_version_table_is_adopted_by_upgrade(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = Secret(database_url)
    migrations.upgrade(url, "0004_positions_guard")
    _as_before_our_version_table(database_url, "service_0042")
    engine = sa.create_engine(database_url, poolclass=NullPool)
    try:
        assert migrations.current_revision(Database(engine, url)) == "0004_positions_guard"
        with pytest.raises(MigrationsNotAppliedError, match="is at 0004_positions_guard"):
            migrations.check_schema(Database(engine, url))

        with caplog.at_level(logging.INFO, logger=migrations.__name__):
            migrations.upgrade(url)  # what `relay db upgrade` runs

        assert "0004_positions_guard moved from alembic_version to relay_alembic_version" in (
            caplog.text
        )
        head = migrations.head_revision()
        assert _versions(database_url, "relay_alembic_version") == [head]
        assert _versions(database_url, "alembic_version") == ["service_0042"]
        migrations.check_schema(Database(engine, url))
        migrations.downgrade(url, "-1")
        migrations.upgrade(url)
        assert _versions(database_url, "alembic_version") == ["service_0042"]
    finally:
        engine.dispose()


def test_the_start_up_check_accepts_a_current_revision_not_yet_adopted(
    database_url: str,
) -> None:
    """A relay of this release starts on a database that an earlier release migrated to
    the same head, and writes nothing (its role may only read)."""
    url = Secret(database_url)
    migrations.upgrade(url)
    _as_before_our_version_table(database_url, "service_0042")
    engine = sa.create_engine(database_url, poolclass=NullPool)
    try:
        migrations.check_schema(Database(engine, url))
    finally:
        engine.dispose()
    head = migrations.head_revision()
    assert _versions(database_url, "alembic_version") == sorted([head, "service_0042"])
    assert run_sql(database_url, "SELECT to_regclass('relay_alembic_version')") == [(None,)]
