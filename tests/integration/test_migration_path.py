"""A database created by the first release (revision 0001_outbox) gets every later outbox
safeguard from ``relay db upgrade``, keeps its pending rows, and can go back."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

import relay
from relay.postgres import migrations
from relay.runtime.secrets import Secret

_TRIGGER_FUNCTIONS = ("outbox_assign_partition", "outbox_sequence_at_commit")


def _definer_functions(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT proname FROM pg_proc WHERE proname = ANY(:names) AND prosecdef"
                " AND array_to_string(proconfig, ',') LIKE 'search_path=%'"
            ),
            {"names": list(_TRIGGER_FUNCTIONS)},
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
        assert _definer_functions(engine) == set(_TRIGGER_FUNCTIONS)
        assert _commit_raises_synchronous_commit(engine)
        with engine.connect() as conn:
            pending = conn.execute(sa.text("SELECT topic, seq FROM outbox ORDER BY id")).all()
        assert [row.topic for row in pending] == ["orders", "t", "t"]
        assert all(row.seq is not None for row in pending)

        migrations.downgrade(url, "0001_outbox")

        assert "outbox_dead_letters" not in _tables(engine)
        assert _definer_functions(engine) == set()
        assert not _commit_raises_synchronous_commit(engine)
    finally:
        engine.dispose()
