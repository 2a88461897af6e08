"""Contract of :class:`relay.publishing.ports.OutboxSource`: the in-memory
``MemoryOutbox`` and ``PostgresOutboxSource`` on a migrated database.

Rows are written the way each side gets them: through the write API (``relay.publish_many``,
one transaction per :meth:`write`, the database assigning partition and seq) or, for the
fake, with ids and seqs drawn the same way (one sequence for all partitions, in commit
order).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Protocol

import pytest
import sqlalchemy as sa

import relay
from relay.postgres import outbox_holds
from relay.postgres.engine import Database
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.publishing.ports import OutboxSource
from relay.publishing.types import Headers, OutboxRecord
from relay.runtime.secrets import Secret
from tests.contract.conftest import RELAY_PARTITIONS, memory_and
from tests.fakes.publishing import MemoryOutbox
from tests.partitioning import partition_of

TOPIC = "orders"


def event_fields(n: int) -> tuple[bytes | None, str | None, Headers]:
    """Value, event type and headers of the ``n``-th event: some tombstones, some
    without event type, some with headers."""
    value = None if n % 3 == 2 else b'{"n": %d}' % n
    event_type = "OrderPlaced" if n % 2 == 0 else None
    headers: Headers = (("trace-id", b"t-%d" % n),) if n % 2 == 0 else ()
    return value, event_type, headers


class OutboxHarness(Protocol):
    source: OutboxSource

    def write(self, partition: int, count: int, key: bytes | None = None) -> list[OutboxRecord]:
        """Commit ``count`` rows to ``partition`` in one transaction (of ``key`` when given:
        one of ``partition``); the rows as the source must return them."""
        ...

    def dead_letters(self) -> list[tuple[int, str]]:
        """(outbox id, error) of every dead-lettered row, by outbox id."""
        ...


class MemoryHarness:
    def __init__(self) -> None:
        self.outbox = MemoryOutbox()
        self.source: OutboxSource = self.outbox
        self._ids = itertools.count(1)
        self._seqs = itertools.count(1)

    def write(self, partition: int, count: int, key: bytes | None = None) -> list[OutboxRecord]:
        records = []
        given = key
        for _ in range(count):
            outbox_id = next(self._ids)
            value, event_type, headers = event_fields(outbox_id)
            key = given or b"key-%d" % outbox_id
            seq = next(self._seqs)
            records.append(
                OutboxRecord(
                    outbox_id,
                    partition,
                    seq,
                    TOPIC,
                    key,
                    value,
                    event_type,
                    headers,
                    seq * 1000,
                    committed_ms=seq * 1000 + 1,  # its transaction's commit time
                )
            )
        self.outbox.add(*records)
        return records

    def dead_letters(self) -> list[tuple[int, str]]:
        return sorted(self.outbox.dead)


class PostgresHarness:
    def __init__(self, engine: sa.Engine, database_url: str) -> None:
        self._engine = engine
        self.source: OutboxSource = PostgresOutboxSource(Database(engine, Secret(database_url)))
        self._keys = (b"key-%d" % n for n in itertools.count())
        self._last_id = 0
        self._events = itertools.count(1)

    def _key_in(self, partition: int) -> bytes:
        return next(k for k in self._keys if partition_of(k, RELAY_PARTITIONS) == partition)

    def write(self, partition: int, count: int, key: bytes | None = None) -> list[OutboxRecord]:
        expected = []
        events = []
        given = key
        for _ in range(count):
            key = given or self._key_in(partition)
            value, event_type, headers = event_fields(next(self._events))
            event_id = relay.new_event_id()  # the write API stores it first in the headers
            stored = (("event-id", str(event_id).encode()), *headers)
            expected.append((key, value, event_type, stored))
            events.append(relay.Event(TOPIC, key, value, list(headers), event_type, event_id))
        with self._engine.begin() as conn:
            relay.publish_many(conn, events)
        with self._engine.begin() as conn:  # as the relay draws before it reads
            conn.execute(sa.text("SELECT outbox_draw()"))
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT p.id, p.partition, p.position AS seq, "
                    "(extract(epoch FROM o.created_at) * 1000)::int8 AS at_ms, "
                    "(SELECT (extract(epoch FROM c.committed_at) * 1000)::int8 "
                    " FROM outbox_commits c WHERE c.partition = p.partition "
                    " AND p.position BETWEEN c.first_seq AND c.last_seq) AS done_ms "
                    "FROM outbox_positions p JOIN outbox o ON o.id = p.id "
                    "WHERE p.id > :last ORDER BY p.id"
                ),
                {"last": self._last_id},
            ).all()
        assert len(rows) == count
        assert {row.partition for row in rows} == {partition}
        assert len({row.done_ms for row in rows}) == 1  # one transaction, one commit time
        assert rows[0].done_ms >= max(row.at_ms for row in rows)
        self._last_id = rows[-1].id
        return [
            OutboxRecord(
                row.id, row.partition, row.seq, TOPIC, *fields, row.at_ms, committed_ms=row.done_ms
            )
            for row, fields in zip(rows, expected, strict=True)
        ]

    def dead_letters(self) -> list[tuple[int, str]]:
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT outbox_id, error FROM outbox_dead_letters ORDER BY outbox_id")
            ).all()
        return [(int(row.outbox_id), str(row.error)) for row in rows]


@pytest.fixture(params=memory_and("postgres"))
def outbox(request: pytest.FixtureRequest) -> Iterator[OutboxHarness]:
    if request.param == "memory":
        yield MemoryHarness()
        return
    engine: sa.Engine = request.getfixturevalue("engine")
    yield PostgresHarness(engine, request.getfixturevalue("migrated_database"))


def test_nothing_in_an_empty_outbox(outbox: OutboxHarness) -> None:
    source = outbox.source
    assert source.high_water(0) == 0
    assert list(source.fetch(0, 0, 100)) == []
    assert source.last_assigned_seq() == 0
    assert source.record_published(0, 100, delete_rows=True) == 0
    assert source.dead_letter(0, [1, 2], "refused") == 0
    assert outbox.dead_letters() == []


def test_fetch_returns_committed_rows_as_written_in_seq_order(outbox: OutboxHarness) -> None:
    rows = outbox.write(1, 6)
    fetched = list(outbox.source.fetch(1, 0, 100))
    assert fetched == rows
    assert [r.seq for r in fetched] == sorted(r.seq for r in rows)
    assert outbox.source.high_water(1) == rows[-1].seq


def test_fetch_returns_at_most_limit_rows_after_after_seq(outbox: OutboxHarness) -> None:
    rows = outbox.write(0, 5)
    source = outbox.source
    assert list(source.fetch(0, 0, 2)) == rows[:2]
    assert list(source.fetch(0, rows[1].seq, 2)) == rows[2:4]
    assert list(source.fetch(0, rows[3].seq, 2)) == rows[4:]
    assert list(source.fetch(0, rows[-1].seq, 2)) == []


def test_fetch_stops_at_up_to_seq(outbox: OutboxHarness) -> None:
    rows = outbox.write(0, 5)
    source = outbox.source
    assert list(source.fetch(0, 0, 100, up_to_seq=rows[2].seq)) == rows[:3]
    assert list(source.fetch(0, rows[1].seq, 100, up_to_seq=rows[3].seq)) == rows[2:4]
    assert list(source.fetch(0, rows[1].seq, 1, up_to_seq=rows[3].seq)) == rows[2:3]
    assert list(source.fetch(0, rows[3].seq, 100, up_to_seq=rows[1].seq)) == []


def test_partitions_are_independent_and_share_one_sequence(outbox: OutboxHarness) -> None:
    first = outbox.write(0, 2)
    other = outbox.write(2, 3)
    last = outbox.write(0, 2)
    source = outbox.source
    # One sequence for all partitions, drawn in commit order: partition 0 has a gap
    # where partition 2's transaction committed.
    assert first[-1].seq < other[0].seq and other[-1].seq < last[0].seq
    assert list(source.fetch(0, 0, 100)) == first + last
    assert list(source.fetch(0, first[-1].seq, 100)) == last
    assert list(source.fetch(0, other[0].seq, 100)) == last
    assert list(source.fetch(2, 0, 100)) == other
    assert list(source.fetch(1, 0, 100)) == []
    assert [source.high_water(p) for p in range(RELAY_PARTITIONS)] == [
        last[-1].seq,
        0,
        other[-1].seq,
        0,
    ]
    assert source.last_assigned_seq() == last[-1].seq


def test_last_assigned_seq_never_goes_back(outbox: OutboxHarness) -> None:
    published = outbox.write(3, 2)
    refused = outbox.write(1, 1)
    source = outbox.source
    assert source.last_assigned_seq() == refused[0].seq
    assert source.record_published(3, published[-1].seq, delete_rows=True) == 2
    assert source.dead_letter(1, [refused[0].id], "refused") == 1
    assert list(source.fetch(3, 0, 100)) == list(source.fetch(1, 0, 100)) == []
    assert source.last_assigned_seq() == refused[0].seq


def test_dead_letter_moves_exactly_the_given_rows_of_the_partition(
    outbox: OutboxHarness,
) -> None:
    rows = outbox.write(0, 3)
    elsewhere = outbox.write(1, 1)
    source = outbox.source
    unknown = elsewhere[0].id + 1000
    moved = source.dead_letter(0, [rows[1].id, elsewhere[0].id, unknown], "too large")
    assert moved == 1
    assert list(source.fetch(0, 0, 100)) == [rows[0], rows[2]]
    assert list(source.fetch(1, 0, 100)) == elsewhere
    assert outbox.dead_letters() == [(rows[1].id, "too large")]
    # Moving the same row again moves nothing.
    assert source.dead_letter(0, [rows[1].id], "again") == 0
    assert outbox.dead_letters() == [(rows[1].id, "too large")]


def test_dead_letter_moves_several_rows_at_once(outbox: OutboxHarness) -> None:
    rows = outbox.write(2, 4)
    source = outbox.source
    assert source.dead_letter(2, [rows[3].id, rows[0].id], "refused") == 2
    assert list(source.fetch(2, 0, 100)) == rows[1:3]
    assert outbox.dead_letters() == [(rows[0].id, "refused"), (rows[3].id, "refused")]


@pytest.mark.parametrize("per_transaction", [1, 3])
def test_fetch_reads_past_a_batch_of_positions_whose_rows_were_dead_lettered(
    outbox: OutboxHarness, per_transaction: int
) -> None:
    """A fetch returns the next rows even when the first ``limit`` positions after
    ``after_seq`` lost their rows: an empty batch would read as a drained partition."""
    gone = [row for _ in range(4) for row in outbox.write(0, per_transaction)]
    kept = outbox.write(0, 2)
    source = outbox.source
    assert source.dead_letter(0, [row.id for row in gone], "refused") == len(gone)
    assert list(source.fetch(0, 0, 2)) == kept
    assert list(source.fetch(0, 0, 1)) == kept[:1]
    assert list(source.fetch(0, 0, 1, up_to_seq=gone[-1].seq)) == []


def test_record_published_removes_the_rows_up_to_the_position(outbox: OutboxHarness) -> None:
    rows = [row for _ in range(4) for row in outbox.write(0, 1)]  # one per transaction
    elsewhere = [row for _ in range(2) for row in outbox.write(1, 1)]
    source = outbox.source
    assert source.record_published(0, rows[1].seq, delete_rows=True) == 2
    assert list(source.fetch(0, 0, 100)) == rows[2:]
    assert source.record_published(0, rows[1].seq, delete_rows=True) == 0
    assert source.record_published(0, 0, delete_rows=True) == 0
    assert source.high_water(0) == rows[-1].seq
    # Seqs past the partition's own rows (here: partition 1's) delete what is left.
    assert source.record_published(0, elsewhere[-1].seq, delete_rows=True) == 2
    assert list(source.fetch(0, 0, 100)) == []
    assert list(source.fetch(1, 0, 100)) == elsewhere
    assert outbox.dead_letters() == []


def test_record_published_raises_the_floor_and_never_lowers_it(outbox: OutboxHarness) -> None:
    rows = [row for _ in range(4) for row in outbox.write(0, 1)]  # one per transaction
    source = outbox.source
    assert source.published_floor(0) == 0
    assert source.record_published(0, rows[1].seq, delete_rows=False) == 0
    assert source.published_floor(0) == rows[1].seq
    assert list(source.fetch(0, 0, 100)) == rows  # kept: no clean-up asked for
    assert source.record_published(0, rows[0].seq, delete_rows=True) == 1
    assert source.published_floor(0) == rows[1].seq  # a lower position leaves the floor
    assert source.published_floor(1) == 0  # floors are per partition


def test_the_database_has_one_identity(outbox: OutboxHarness) -> None:
    first, second = outbox.source.identity(), outbox.source.identity()
    assert first == second
    assert first.database_id
    assert first.default_prefix.startswith("outbox-relay")


@pytest.mark.parametrize("many_dead_letters", [False, True], ids=["few keys", "many keys"])
def test_rows_after_a_dead_letter_of_their_key_name_its_first(
    outbox: OutboxHarness, many_dead_letters: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """I2: a fetched row behind a dead letter of its key names the key's first dead letter
    (``follows``), an earlier row of the key does not, nor do rows of other keys. "many
    keys": the lookup by the batch's keys, used past outbox_holds.FEW_KEYS."""
    if many_dead_letters:
        monkeypatch.setattr(outbox_holds, "FEW_KEYS", 0)
    key = next(
        k for k in (b"follow-%d" % n for n in range(1000)) if partition_of(k, RELAY_PARTITIONS) == 0
    )
    before, first, second, after = (outbox.write(0, 1, key=key)[0] for _ in range(4))
    other = outbox.write(0, 1)[0]
    outbox.source.dead_letter(0, [first.id], "refused")
    outbox.source.dead_letter(0, [second.id], "follows")
    fetched = {r.id: r.follows for r in outbox.source.fetch(0, 0, 100)}
    assert set(fetched) == {before.id, after.id, other.id}
    assert fetched[before.id] is None and fetched[other.id] is None
    assert fetched[after.id] is not None  # the first dead letter's id
    outbox.source.dead_letter(0, [after.id], "follows")
    assert [r.follows for r in outbox.source.fetch(0, 0, 100)] == [None, None]
