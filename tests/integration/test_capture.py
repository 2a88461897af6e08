"""I1: outbox rows commit and roll back with the caller's business rows."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from confluent_kafka import TIMESTAMP_CREATE_TIME
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.pool import NullPool

import relay
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    draw,
    read_committed,
    run_relay,
)
from tests.partitioning import partition_of


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    total: Mapped[int]


def test_rolled_back_transaction_publishes_nothing(relay_env: RelayTestEnv, topic: str) -> None:
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    Base.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        session.add(Order(id=1, total=10))
        relay.publish(session, topic, "order-1", {"id": 1, "total": 10}, event_type="OrderPlaced")
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        session.add(Order(id=2, total=20))
        relay.publish(session, topic, "order-2", {"id": 2, "total": 20})
        raise RuntimeError("the service fails after writing")
    with engine.connect() as conn:  # Core connection, explicit rollback
        conn.execute(sa.insert(Order.__table__), {"id": 3, "total": 30})
        relay.publish(conn, topic, "order-3", b"raw bytes")
        conn.rollback()
    with engine.begin() as conn:
        conn.execute(sa.insert(Order.__table__), {"id": 4, "total": 40})
        relay.publish(conn, topic, b"order-4", b"\x00\x01", headers={"trace": "abc"})
    committed = {int(r[0]) for r in relay_env.sql("SELECT id FROM outbox")}
    assert len(committed) == 2
    engine.dispose()

    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr

    consumed = read_committed(relay_env.bootstrap_servers, topic)
    assert_exactly_once_in_order(consumed, committed)
    by_key = {r.key: r for r in consumed}
    assert set(by_key) == {b"order-1", b"order-4"}
    assert by_key[b"order-1"].value == b'{"id":1,"total":10}'
    assert by_key[b"order-1"].headers["event-type"] == b"OrderPlaced"
    assert by_key[b"order-4"].headers["trace"] == b"abc"
    assert by_key[b"order-4"].value == b"\x00\x01"
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]


def test_partition_assignment_matches_the_python_function(relay_env: RelayTestEnv) -> None:
    keys = [f"key-{i}".encode() for i in range(200)]
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    with engine.begin() as conn:
        relay.publish_many(conn, [relay.Event("t", k, None) for k in keys])
    draw(relay_env.database_url)
    rows = relay_env.sql("SELECT key, partition, position FROM outbox_positions ORDER BY id")
    engine.dispose()
    assert [bytes(r[0]) for r in rows] == keys  # type: ignore[arg-type]
    assert all(r[1] == partition_of(bytes(r[0]), 4) for r in rows)  # type: ignore[arg-type]
    assert len({r[1] for r in rows}) == 4
    for partition in range(4):  # in each partition, positions in the order the rows were written
        seqs = [r[2] for r in rows if r[1] == partition]
        assert len(set(seqs)) == len(seqs) and seqs == sorted(seqs)  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("topic_name", "value", "message"),
    [
        ("bad topic!", b"x", "invalid Kafka topic name"),
        ("ok", {1, 2}, "JSON-serialisable"),
    ],
)
def test_invalid_events_are_refused_before_anything_is_written(
    relay_env: RelayTestEnv, topic_name: str, value: object, message: str
) -> None:
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    with engine.begin() as conn, pytest.raises(relay.InvalidEventError, match=message):
        relay.publish(conn, topic_name, "k", value)
    engine.dispose()
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]


def test_drawn_commits_are_durable_even_when_their_writers_turned_synchronous_commit_off(
    relay_env: RelayTestEnv,
) -> None:
    """The relay publishes what a committed draw placed; a commit a crash could take back
    must not be published. A writer may commit with synchronous_commit off: the draw that
    places its rows commits with it on, and its commit record follows the writer's, so
    the flush of the draw's commit flushes the writer's too (0017_relay_drawn_positions)."""
    engine = sa.create_engine(relay_env.database_url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL synchronous_commit = off"))
        relay.publish(conn, "t", "k", {"n": 1})
    with engine.begin() as conn:  # a draw in a session whose setting is off
        conn.execute(sa.text("SET LOCAL synchronous_commit = off"))
        assert conn.execute(sa.text("SELECT drawn FROM outbox_draw()")).scalar_one() == 1
        assert conn.execute(sa.text("SHOW synchronous_commit")).scalar_one() == "on"
    with engine.begin() as conn:  # a draw that places nothing keeps the setting
        conn.execute(sa.text("SET LOCAL synchronous_commit = off"))
        assert conn.execute(sa.text("SELECT drawn FROM outbox_draw()")).scalar_one() == 1
        assert conn.execute(sa.text("SHOW synchronous_commit")).scalar_one() == "off"
    engine.dispose()


def test_records_carry_the_event_time_as_their_kafka_timestamp(
    relay_env: RelayTestEnv, topic: str
) -> None:
    """A record's Kafka timestamp is its row's created_at (CreateTime), not the time the
    relay happened to publish it, so consumers and retention see when the event happened."""
    relay_env.sql(
        "INSERT INTO outbox (topic, key, value, created_at) VALUES "
        f"('{topic}', 'old', 'a', '2024-02-29 12:34:56.789+00'), "
        f"('{topic}', 'now', 'b', now())"
    )
    written = {
        key: int(ms)
        for key, ms in relay_env.sql(
            "SELECT key, (extract(epoch FROM created_at) * 1000)::int8 FROM outbox"
        )
    }
    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr

    consumed = {r.key: r.timestamp for r in read_committed(relay_env.bootstrap_servers, topic)}
    assert consumed == {
        b"old": (TIMESTAMP_CREATE_TIME, 1709210096789),
        b"now": (TIMESTAMP_CREATE_TIME, written[b"now"]),
    }
    assert written[b"old"] == 1709210096789
