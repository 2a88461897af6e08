"""What the outbox vouches for with each horizon (``outbox_horizon_as_of``, read by
:meth:`PostgresOutboxSource.settled`): every row of a relay partition committed before
``as_of`` is at or below ``top``; nothing while a writer holds the horizon up."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
import sqlalchemy as sa

import relay
from relay.postgres.engine import Database, make_engine
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.runtime.secrets import Secret
from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.support import RelayTestEnv
from tests.partitioning import partition_of

KEY = b"key-0"
P = partition_of(KEY, RELAY_PARTITIONS)


@pytest.fixture
def engine(relay_env: RelayTestEnv) -> Iterator[sa.Engine]:
    engine = make_engine(Secret(relay_env.database_url), pool_size=2)
    yield engine
    engine.dispose()


@pytest.fixture
def source(engine: sa.Engine, relay_env: RelayTestEnv) -> PostgresOutboxSource:
    database = Database(engine, Secret(relay_env.database_url))
    return PostgresOutboxSource(database, settling=True)


def _write(engine: sa.Engine) -> tuple[int, datetime]:
    """One row of partition P committed: its position, and the database's time after."""
    with engine.begin() as conn:
        relay.publish(conn, "t", KEY, b"{}")
    with engine.begin() as conn:  # as the relay draws before it reads
        conn.execute(sa.text("SELECT outbox_draw()"))
    with engine.connect() as conn:
        position = conn.execute(sa.text("SELECT max(position) FROM outbox_positions")).scalar()
        now = conn.execute(sa.text("SELECT clock_timestamp()")).scalar()
    return int(position), now  # type: ignore[arg-type]


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def test_a_fetch_vouches_for_every_commit_before_it(
    engine: sa.Engine, source: PostgresOutboxSource
) -> None:
    assert source.settled(P) is None
    first, _ = _write(engine)
    second, committed = _write(engine)
    assert [r.seq for r in source.fetch(P, 0, 100)] == [first, second]
    found = source.settled(P)
    assert found is not None
    assert (found.top, found.partitions) == (second, RELAY_PARTITIONS)
    assert found.as_of_ms >= _ms(committed)
    assert source.fetch(P, second, 100) == []  # drained: nothing above the position
    drained = source.settled(P)
    assert drained is not None and drained.top <= second and drained.as_of_ms >= found.as_of_ms


def test_a_transaction_left_open_holds_nothing_up_and_comes_after_when_it_commits(
    engine: sa.Engine, source: PostgresOutboxSource
) -> None:
    """A writer's transaction is drawn once it commits: one left open holds no horizon
    and no time vouched for (0017_relay_drawn_positions)."""
    first, _ = _write(engine)
    with engine.connect() as conn:
        conn.begin()
        relay.publish(conn, "t", KEY, b"{}")  # open, with the smaller id
        later, committed = _write(engine)
        assert [r.seq for r in source.fetch(P, 0, 100)] == [first, later]
        found = source.settled(P)
        assert found is not None and found.top == later
        assert found.as_of_ms >= _ms(committed)
        conn.commit()
    (last,) = source.fetch(P, later, 100)
    assert last.seq > later
