from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from relay import devenv
from relay.devenv import Endpoints
from relay.devenv.ports import free_ports
from tests.integration.replicate_support import ReplicaEnv, new_group
from tests.integration.support import RelayTestEnv, migrate, new_prefix

RELAY_PARTITIONS = 4
GROUPS = ("outbox_writer", "outbox_relay", "outbox_mirror")


@pytest.fixture
def relay_env(database_url: str, bootstrap_servers: str) -> RelayTestEnv:
    """A migrated database with 4 relay partitions and relay ids unique to the test."""
    migrate(database_url, RELAY_PARTITIONS)
    return RelayTestEnv(database_url, bootstrap_servers, new_prefix())


@pytest.fixture
def replica(bootstrap_servers: str, target_bootstrap_servers: str) -> ReplicaEnv:
    """`relay replicate` from the dev cluster to the second one, with a group of its own."""
    return ReplicaEnv(bootstrap_servers, target_bootstrap_servers, new_group())


@pytest.fixture
def topic(make_topic: Callable[..., str]) -> str:
    return make_topic(partitions=3)


@pytest.fixture
def login_roles(endpoints: Endpoints, relay_env: RelayTestEnv) -> Iterator[dict[str, str]]:
    """A login role in each group role; returns group -> database URL logging in as it."""
    admin = sa.create_engine(endpoints.admin_database_url, poolclass=NullPool)
    logins: dict[str, str] = {}
    with admin.begin() as conn:
        for group in GROUPS:
            conn.execute(
                sa.text(
                    f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{group}') "
                    f"THEN CREATE ROLE {group} NOLOGIN; END IF; END $$"
                )
            )
            name, password = f"{group}_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
            conn.execute(sa.text(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE {group}"))
            url = sa.make_url(relay_env.database_url).set(username=name, password=password)
            logins[group] = url.render_as_string(hide_password=False)
    yield logins
    with admin.begin() as conn:
        for login in logins.values():
            conn.execute(sa.text(f"DROP ROLE IF EXISTS {sa.make_url(login).username}"))
    admin.dispose()


@pytest.fixture
def private_postgres(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A PostgreSQL server of the test's own (free port, its own working directory), so that
    restarting or reconfiguring it disturbs no other test; its working directory and
    database URL."""
    workdir = tmp_path / "private-pg"
    url = devenv.start_postgres(workdir, port=free_ports(1)[0])
    try:
        yield workdir, url
    finally:
        devenv.stop_postgres(workdir, hard=True)
