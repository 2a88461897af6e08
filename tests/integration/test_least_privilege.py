"""The relay's users run under least-privilege roles (`relay db roles`)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.pool import NullPool

import relay
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    draw,
    read_committed,
    run_relay,
)


def test_services_and_relay_need_no_more_than_their_roles(
    relay_env: RelayTestEnv, topic: str, login_roles: dict[str, str]
) -> None:
    granted = run_relay(relay_env, "db", "roles", "--database-url", relay_env.database_url)
    assert granted.returncode == 0, granted.stderr

    writer = sa.create_engine(login_roles["outbox_writer"], poolclass=NullPool)
    with writer.begin() as conn:
        relay.publish_many(conn, [relay.Event(topic, f"k{n % 7}", {"n": n}) for n in range(50)])
    with pytest.raises(ProgrammingError, match="permission denied"), writer.connect() as conn:
        conn.execute(sa.text("SELECT count(*) FROM outbox"))
    with pytest.raises(ProgrammingError, match="permission denied"), writer.begin() as conn:
        conn.execute(sa.text("UPDATE outbox_settings SET partitions = 1"))
    writer.dispose()
    committed = {int(r[0]) for r in relay_env.sql("SELECT id FROM outbox")}  # type: ignore[call-overload]
    assert len(committed) == 50
    draw(relay_env.database_url)
    assert relay_env.sql("SELECT count(*) FROM outbox_positions") == [(50,)]

    result = run_relay(relay_env, "run", "--once", RELAY_DATABASE_URL=login_roles["outbox_relay"])
    assert result.returncode == 0, result.stderr
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]

    relay_role = sa.create_engine(login_roles["outbox_relay"], poolclass=NullPool)
    with pytest.raises(ProgrammingError, match="permission denied"), relay_role.begin() as conn:
        relay.publish(conn, topic, "k", {"forged": True})
    relay_role.dispose()
