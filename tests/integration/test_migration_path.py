"""A database created by the first release (revision 0001_outbox) gets every later outbox
safeguard from ``relay db upgrade``, keeps its pending rows, and can go back; one migrated
before the relay's own version table (relay_alembic_version) is adopted."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay
from relay.errors import MigrationsNotAppliedError
from relay.postgres import migrations
from relay.postgres.engine import Database
from relay.runtime.secrets import Secret
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    new_prefix,
    read_committed,
    run_relay,
    run_sql,
)

PARTITIONS = 4

# The functions that need the schema owner's rights, before 0007_commit_markers and now
# (0017_relay_drawn_positions: no function runs in a writer's transaction).
_DEFINER_FUNCTIONS = ("outbox_assign_partition", "outbox_sequence_at_commit")
_DEFINER_FUNCTIONS_NOW = ("outbox_draw", "outbox_horizon")


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


def _draw_raises_synchronous_commit(engine: sa.Engine) -> bool:
    """Whether a draw that places rows commits with synchronous_commit on (0017)."""
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL synchronous_commit = off"))
        conn.execute(sa.text("SELECT outbox_draw()"))
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
        assert not _commit_raises_synchronous_commit(engine)
        assert _draw_raises_synchronous_commit(engine)
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


def test_rows_written_under_every_way_of_sequencing_are_published_once_after_the_upgrade(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """Rows sequenced row by row (0006), by commit markers (0016; some rows of their
    transactions gone) and drawn by the relay (now) wait together; one relay run
    publishes each once, in order."""
    url = Secret(database_url)
    migrations.upgrade(url, "0006_sequence_check_by_key")
    run_sql(database_url, "UPDATE outbox_settings SET partitions = :n", n=PARTITIONS)
    engine = sa.create_engine(database_url, poolclass=NullPool)
    env = RelayTestEnv(database_url, bootstrap_servers, new_prefix())
    topic = make_topic(partitions=3)

    def write(first: int, transactions: int) -> None:
        for n in range(first, first + transactions):
            with engine.begin() as conn:  # 1 to 3 events per transaction, keys shared
                relay.publish_many(
                    conn,
                    [relay.Event(topic, f"k{(n + i) % 5}", {"n": n}) for i in range(n % 3 + 1)],
                )

    try:
        write(0, 12)
        migrations.upgrade(url, "0016_shared_single_draws")
        write(12, 12)
        # Rows gone from inside transactions' markers (dead-lettered, say): their
        # positions stay empty.
        run_sql(
            database_url,
            "DELETE FROM outbox WHERE id IN (SELECT first_id + 1 FROM outbox_commits "
            "WHERE last_seq > first_seq)",
        )
        migrations.upgrade(url)
        write(24, 12)
    finally:
        engine.dispose()
    ids = {int(r[0]) for r in run_sql(database_url, "SELECT id FROM outbox")}  # type: ignore[call-overload]

    result = run_relay(env, "run", "--once", "--batch-size", "7")
    assert result.returncode == 0, result.stderr
    assert_exactly_once_in_order(read_committed(bootstrap_servers, topic), ids)
    assert run_sql(database_url, "SELECT count(*) FROM outbox") == [(0,)]
