"""The write path (I2, 0017_relay_drawn_positions): every kind of writer gets a relay
partition and a position for each row once drawn, and SERIALIZABLE writers of events do
not conflict."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.integration.support import RelayTestEnv, draw, run_sql
from tests.partitioning import partition_of

PARTITIONS = 4  # as relay_env


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _keys_in(partition: int, count: int, prefix: str) -> list[str]:
    found = (f"{prefix}-{n}" for n in range(10_000))
    return [k for k in found if partition_of(k.encode(), PARTITIONS) == partition][:count]


@pytest.fixture
def outbox_url(relay_env: RelayTestEnv) -> str:
    return relay_env.database_url


@pytest.fixture
def serializable_pair(outbox_url: str) -> Iterator[tuple[psycopg.Connection, psycopg.Connection]]:
    first, second = (psycopg.connect(_libpq(outbox_url)) for _ in range(2))
    try:
        for conn in (first, second):
            conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        yield first, second
    finally:
        first.close()
        second.close()


def _positions(url: str) -> list[tuple[int, int, int, bytes | None]]:
    """(id, partition, position, key) of every row, by id."""
    draw(url)
    rows = run_sql(url, "SELECT id, partition, position, key FROM outbox_positions ORDER BY id")
    return [(int(i), int(p), int(s), None if k is None else bytes(k)) for i, p, s, k in rows]  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "spread",
    ["several keys of one relay partition", "keys of several relay partitions"],
)
def test_serializable_writers_of_several_keys_both_commit(
    outbox_url: str,
    serializable_pair: tuple[psycopg.Connection, psycopg.Connection],
    spread: str,
) -> None:
    """Two SERIALIZABLE transactions, each writing events of several keys, their inserts
    interleaved: sequencing reads no row the other wrote (the relay draws the positions,
    after both commit), so both commit (SQLSTATE 40001, could not serialize access, when
    the writers' own commits scanned the outbox by id range)."""
    if spread.startswith("several keys"):
        keys = [_keys_in(2, 3, f"w{n}") for n in range(2)]
    else:
        keys = [[f"w{n}-{i}" for i in range(6)] for n in range(2)]
        assert len({partition_of(k.encode(), PARTITIONS) for k in keys[0]}) > 1
    for i in range(len(keys[0])):
        for conn, mine in zip(serializable_pair, keys, strict=True):
            conn.execute(
                "INSERT INTO outbox (topic, key, value) VALUES ('t', %s, NULL)",
                (mine[i].encode(),),
            )
    for conn in serializable_pair:
        conn.commit()  # psycopg.errors.SerializationFailure here when sequencing conflicts
    rows = _positions(outbox_url)
    assert len(rows) == 2 * len(keys[0])
    assert len({position for _, _, position, _ in rows}) == len(rows)


def _assert_sequenced(url: str, expected_keys: list[bytes | None]) -> None:
    """Every row has one position of its own, in its key's relay partition, and the rows
    of one transaction and key are in id order."""
    rows = _positions(url)
    assert [key for _, _, _, key in rows] == expected_keys
    assert len({position for _, _, position, _ in rows}) == len(rows)
    for row_id, partition, _, key in rows:
        expected = partition_of(key, PARTITIONS) if key is not None else row_id % PARTITIONS
        assert partition == expected, (row_id, key)
    by_key: dict[bytes | None, list[int]] = {}
    for _, _, position, key in rows:
        by_key.setdefault(key, []).append(position)
    for key, positions in by_key.items():
        if key is not None:
            assert positions == sorted(positions), key


def test_every_kind_of_writer_gets_a_position_for_each_row(outbox_url: str) -> None:
    """Multi-row INSERTs, INSERT ... SELECT, COPY, several statements of several keys,
    a rolled-back savepoint, rows without a key, and a transaction sequenced early."""
    keys: list[bytes | None] = []
    with psycopg.connect(_libpq(outbox_url)) as conn:
        insert = "INSERT INTO outbox (topic, key, value) VALUES ('t', %s, 'v')"
        conn.execute(  # one statement, several keys and partitions
            "INSERT INTO outbox (topic, key, value) "
            "SELECT 't', convert_to('s-' || (g % 7)::text, 'UTF8'), 'v' "
            "FROM generate_series(1, 40) g"
        )
        keys += [f"s-{g % 7}".encode() for g in range(1, 41)]
        conn.commit()
        for key in (b"one", b"one", b"two", b"one", None, b"three"):  # statement by statement
            conn.execute(insert, (key,))
            keys.append(key)
        conn.commit()
        conn.execute(insert, (b"kept",))
        with conn.transaction():  # a savepoint, released
            conn.execute(insert, (b"inner",))
        try:
            with conn.transaction():  # a savepoint, rolled back: its rows are gone
                conn.execute(insert, (b"gone",))
                conn.execute(insert, (b"gone-too",))
                raise RuntimeError
        except RuntimeError:
            pass
        conn.execute(insert, (b"kept",))
        keys += [b"kept", b"inner", b"kept"]
        conn.commit()
        with conn.cursor().copy("COPY outbox (topic, key, value) FROM STDIN") as copy:
            for n in range(5):
                copy.write_row(("t", f"c-{n % 2}".encode(), b"v"))
        keys += [f"c-{n % 2}".encode() for n in range(5)]
        conn.commit()
        conn.execute(insert, (b"early",))
        conn.execute(insert, (b"early-2",))
        conn.execute("SET CONSTRAINTS ALL IMMEDIATE")  # sequenced now; then a second batch
        conn.execute(insert, (b"late",))
        conn.execute(insert, (b"late-2",))
        keys += [b"early", b"early-2", b"late", b"late-2"]
        conn.commit()
    _assert_sequenced(outbox_url, keys)
