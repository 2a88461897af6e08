from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration.support import RelayTestEnv, migrate, new_prefix

RELAY_PARTITIONS = 4


@pytest.fixture
def relay_env(database_url: str, bootstrap_servers: str) -> RelayTestEnv:
    """A migrated database with 4 relay partitions and relay ids unique to the test."""
    migrate(database_url, RELAY_PARTITIONS)
    return RelayTestEnv(database_url, bootstrap_servers, new_prefix())


@pytest.fixture
def topic(make_topic: Callable[..., str]) -> str:
    return make_topic(partitions=3)
