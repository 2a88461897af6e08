"""History modes (scd2, changelog), metadata columns and the tombstone rule, on the real
servers: every version kept exactly once under replays and kill -9, a late older version
never current, deletes that close, metadata filled, and start-up refusals."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from relay.devenv.reader import read_committed
from tests.integration.mirror_support import MirrorEnv, TxProducer, mirror_env

T0 = datetime(2026, 1, 1, tzinfo=UTC)

HISTORY_DDL = """
CREATE TABLE item_history (
    id integer NOT NULL,
    name text,
    qty integer,
    seq bigint NOT NULL,
    valid_from timestamptz NOT NULL,
    valid_to timestamptz,
    is_current boolean NOT NULL,
    kafka_ts timestamptz,
    src_topic text,
    src_partition integer,
    src_offset bigint,
    applied_at timestamptz,
    UNIQUE (id, seq)
);
CREATE TABLE item_changes (
    id integer NOT NULL,
    name text,
    qty integer,
    seq bigint NOT NULL,
    op text NOT NULL,
    src_offset bigint,
    UNIQUE (id, seq)
);
CREATE TABLE items_now (
    id integer PRIMARY KEY,
    name text NOT NULL,
    seq bigint NOT NULL,
    src_offset bigint,
    kafka_ts timestamptz,
    applied_at timestamptz
);
"""


def history_mapping(topic: str) -> str:
    return f"""
[[tables]]
table = "item_history"
topics = ["{topic}"]
history = "scd2"
key = {{ column = "id" }}
version = {{ column = "seq", source = "header:outbox-seq" }}
[tables.columns]
name = "name"
qty = "qty"
[tables.metadata]
kafka_ts = "kafka_timestamp"
src_topic = "topic"
src_partition = "partition"
src_offset = "offset"
applied_at = "applied_at"

[[tables]]
table = "item_changes"
topics = ["{topic}"]
history = "changelog"
key = {{ column = "id" }}
version = {{ column = "seq", source = "header:outbox-seq" }}
[tables.columns]
name = "name"
qty = "qty"
[tables.metadata]
src_offset = "offset"
"""


NOW_MAPPING = """
[[tables]]
table = "items_now"
topics = ["{topic}"]
key = {{ column = "id" }}
version = {{ column = "seq", source = "header:outbox-seq" }}
{event_types}
[tables.columns]
name = "name"
[tables.metadata]
src_offset = "offset"
kafka_ts = "kafka_timestamp"
applied_at = "applied_at"
"""

# (id, qty or None for a tombstone, seq, seconds after T0, event type or None)
Change = tuple[int, int | None, int, int, str | None]


def produce(bootstrap: str, topic: str, changes: Sequence[Change], partition: int = 0) -> None:
    producer = TxProducer(bootstrap).producer
    producer.begin_transaction()
    for item_id, qty, seq, seconds, event_type in changes:
        headers = [("outbox-seq", str(seq).encode())]
        if event_type is not None:
            headers.append(("event-type", event_type.encode()))
        value = None if qty is None else json.dumps({"name": f"v{seq}", "qty": qty}).encode()
        producer.produce(
            topic,
            value,
            str(item_id).encode(),
            partition=partition,
            headers=headers,
            timestamp=int((T0 + timedelta(seconds=seconds)).timestamp() * 1000),
        )
    producer.commit_transaction(30)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def history(env: MirrorEnv) -> list[tuple[object, ...]]:
    return env.sql(
        "SELECT id, seq, qty, valid_from, valid_to, is_current FROM item_history ORDER BY id, seq"
    )


@pytest.fixture
def topic(make_topic: Callable[..., str]) -> str:
    # The records carry timestamps of T0, older than the brokers' 7-day retention: kept
    # forever, or a retention check between two transactions deletes the first one.
    return make_topic("mirror-history", partitions=1, config={"retention.ms": "-1"})


@pytest.fixture
def env(database_url: str, bootstrap_servers: str, topic: str, tmp_path: Path) -> MirrorEnv:
    return mirror_env(
        database_url, bootstrap_servers, tmp_path, history_mapping(topic), HISTORY_DDL
    )


def test_scd2_keeps_every_version_and_a_tombstone_closes_the_current_one(
    env: MirrorEnv, bootstrap_servers: str, topic: str
) -> None:
    produce(
        bootstrap_servers,
        topic,
        [(1, 10, 1, 0, None), (2, 20, 2, 1, None), (1, 11, 3, 2, None), (1, None, 4, 5, None)],
    )
    produce(bootstrap_servers, topic, [(1, 12, 5, 9, None), (2, 21, 6, 10, None)])
    result = env.run("--once")
    assert result.returncode == 0, result.stderr
    assert history(env) == [
        (1, 1, 10, at(0), at(2), False),
        (1, 3, 11, at(2), at(5), False),  # closed by the tombstone
        (1, 5, 12, at(9), None, True),  # created again
        (2, 2, 20, at(1), at(10), False),
        (2, 6, 21, at(10), None, True),
    ]
    meta = env.sql(
        "SELECT kafka_ts, src_topic, src_partition, src_offset, applied_at IS NOT NULL "
        "FROM item_history WHERE id = 1 ORDER BY seq"
    )
    # Offsets: records 0-3 then a commit marker (4), records 5-6.
    assert meta == [
        (at(0), topic, 0, 0, True),
        (at(2), topic, 0, 2, True),
        (at(9), topic, 0, 5, True),
    ]
    changes = env.sql("SELECT id, seq, op, qty, name, src_offset FROM item_changes ORDER BY seq")
    assert changes == [
        (1, 1, "upsert", 10, "v1", 0),
        (2, 2, "upsert", 20, "v2", 1),
        (1, 3, "upsert", 11, "v3", 2),
        (1, 4, "delete", None, None, 3),
        (1, 5, "upsert", 12, "v5", 5),
        (2, 6, "upsert", 21, "v6", 6),
    ]


def test_a_late_older_version_never_becomes_current(
    env: MirrorEnv, bootstrap_servers: str, topic: str
) -> None:
    produce(bootstrap_servers, topic, [(1, 10, 1, 0, None), (1, 30, 3, 30, None)])
    assert env.run("--once").returncode == 0
    produce(bootstrap_servers, topic, [(1, 20, 2, 20, None)])  # seq 2 arrives last
    result = env.run("--once")
    assert result.returncode == 0, result.stderr
    assert history(env) == [
        (1, 1, 10, at(0), at(20), False),
        (1, 2, 20, at(20), at(30), False),
        (1, 3, 30, at(30), None, True),
    ]


def test_a_replay_from_offset_zero_changes_nothing(
    env: MirrorEnv, bootstrap_servers: str, topic: str
) -> None:
    changes: list[Change] = []
    for n in range(300):
        qty = None if n % 11 == 5 else n
        changes.append((n % 17, qty, n + 1, n, None))
    for start in range(0, len(changes), 50):
        produce(bootstrap_servers, topic, changes[start : start + 50])
    assert env.run("--once", "--batch-size", "32").returncode == 0
    everything = "SELECT * FROM item_history ORDER BY id, seq"
    before = env.sql(everything)
    changelog = env.sql("SELECT * FROM item_changes ORDER BY id, seq")
    assert len(before) == sum(1 for c in changes if c[1] is not None)
    assert len(changelog) == len(changes)

    env.sql("DELETE FROM mirror_offsets WHERE consumer_group = :g", g=env.group)
    replay = env.run("--once", "--batch-size", "32")
    assert replay.returncode == 0, replay.stderr
    assert env.sql(everything) == before  # applied_at included: no row was rewritten
    assert env.sql("SELECT * FROM item_changes ORDER BY id, seq") == changelog


def test_kill_9_between_apply_and_commit_keeps_each_version_once(
    env: MirrorEnv, bootstrap_servers: str, topic: str, tmp_path: Path
) -> None:
    changes: list[Change] = [(n % 13, n, n + 1, n, None) for n in range(400)]
    for start in range(0, len(changes), 100):
        produce(bootstrap_servers, topic, changes[start : start + 100])
    first = env.run(
        "--once",
        "--batch-size",
        "50",
        RELAY_FAILPOINTS=f"mirror_after_apply=kill,once={tmp_path / 'fired'}",
    )
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = env.run("--once", "--batch-size", "50")
    assert second.returncode == 0, second.stderr

    rows = history(env)
    if [(r[0], r[1], r[2]) for r in rows] != sorted((c[0], c[2], c[1]) for c in changes):
        seen = [r.offset for r in read_committed(bootstrap_servers, topic)]
        pytest.fail(
            f"{len(rows)} versions of {len(changes)}; stored offsets {env.offsets()}; Kafka "
            f"gives {len(seen)} records, offsets {seen[:3]}..{seen[-3:]}\n"
            + first.stdout
            + first.stderr
            + "\n=== second ===\n"
            + second.stdout
            + second.stderr
        )
    for this, after in pairwise(rows):
        if this[0] == after[0]:
            assert (this[4], this[5]) == (after[3], False)
    current = [r for r in rows if r[5]]
    assert len(current) == 13 and all(r[4] is None for r in current)
    assert int(str(env.sql("SELECT count(*) FROM item_changes")[0][0])) == len(changes)


def test_metadata_is_filled_on_insert_and_on_update(
    database_url: str, bootstrap_servers: str, topic: str, tmp_path: Path
) -> None:
    mapping = NOW_MAPPING.format(topic=topic, event_types="")
    env = mirror_env(database_url, bootstrap_servers, tmp_path, mapping, HISTORY_DDL)
    produce(bootstrap_servers, topic, [(1, 1, 1, 0, None)])
    assert env.run("--once").returncode == 0
    first = env.sql("SELECT name, src_offset, kafka_ts, applied_at FROM items_now")
    assert first[0][:3] == ("v1", 0, at(0)) and first[0][3] is not None
    produce(bootstrap_servers, topic, [(1, 2, 2, 7, None)])
    assert env.run("--once").returncode == 0
    second = env.sql("SELECT name, src_offset, kafka_ts, applied_at FROM items_now")
    assert second[0][:3] == ("v2", 2, at(7))
    assert isinstance(second[0][3], datetime) and isinstance(first[0][3], datetime)
    assert second[0][3] > first[0][3]


def test_tombstones_without_event_type_delete_and_unlisted_ones_are_reported(
    database_url: str, bootstrap_servers: str, topic: str, tmp_path: Path
) -> None:
    mapping = NOW_MAPPING.format(topic=topic, event_types='event_types = ["ItemSaved"]')
    env = mirror_env(database_url, bootstrap_servers, tmp_path, mapping, HISTORY_DDL)
    produce(
        bootstrap_servers,
        topic,
        [
            (1, 1, 1, 0, "ItemSaved"),
            (2, 2, 2, 0, "ItemSaved"),
            (3, 3, 3, 0, "ItemSaved"),
            (1, None, 4, 1, None),  # no event type: deletes
            (2, None, 5, 1, "ItemArchived"),  # an event type the table does not list
            (3, None, 6, 1, "ItemSaved"),  # listed: deletes
        ],
    )
    result = env.run("--once")
    assert result.returncode == 0, result.stderr
    assert env.sql("SELECT id FROM items_now ORDER BY id") == [(2,)]
    assert (
        f"{topic}[0]: 1 tombstone skipped (offset 4: event type 'ItemArchived' is not "
        "listed for items_now)" in result.stderr
    )
    assert "1 tombstone skipped" in result.stdout


BAD_HISTORY = """
[[tables]]
table = "{table}"
topics = ["TOPIC"]
history = "{mode}"
key = {{ column = "id" }}
version = {{ column = "seq", source = "header:outbox-seq" }}
[tables.columns]
name = "name"
"""


@pytest.mark.parametrize(
    ("ddl", "table", "mode", "extra", "message"),
    [
        (
            "CREATE TABLE h (id int, name text, seq bigint, valid_from timestamptz, "
            "valid_to timestamptz, is_current boolean)",
            "h",
            "scd2",
            "",
            "table h needs a unique constraint on (id, seq) for history mode scd2",
        ),
        (
            "CREATE TABLE h (id int PRIMARY KEY, name text, seq bigint, valid_from timestamptz, "
            "valid_to timestamptz, is_current boolean, UNIQUE (id, seq))",
            "h",
            "scd2",
            "",
            "table h keeps one row per version: its key columns (id) cannot be unique alone",
        ),
        (
            "CREATE TABLE h (id int, name text, seq bigint, valid_from timestamptz, "
            "valid_to timestamptz, is_current text, UNIQUE (id, seq))",
            "h",
            "scd2",
            "",
            "table h: is_current column is_current must be boolean, not TEXT",
        ),
        (
            "CREATE TABLE h (id int, name text, seq bigint, starts timestamptz, "
            "valid_to timestamptz, is_current boolean, UNIQUE (id, seq))",
            "h",
            "scd2",
            "",
            "table h has no column valid_from",
        ),
        (
            "CREATE TABLE h (id int, name text NOT NULL, seq bigint, op text, UNIQUE (id, seq))",
            "h",
            "changelog",
            "",
            "table h: column name must allow NULL (a delete's row has no value)",
        ),
        (
            "CREATE TABLE h (id int PRIMARY KEY, name text, seq bigint, at text)",
            "h",
            "current",
            '[tables.metadata]\nat = "kafka_timestamp"\n',
            "table h: metadata column at (kafka_timestamp) must be timestamptz or timestamp, "
            "not TEXT",
        ),
    ],
)
def test_history_tables_that_cannot_hold_the_guarantee_are_refused_at_start(
    database_url: str,
    bootstrap_servers: str,
    topic: str,
    tmp_path: Path,
    ddl: str,
    table: str,
    mode: str,
    extra: str,
    message: str,
) -> None:
    text = BAD_HISTORY.format(table=table, mode=mode).replace("TOPIC", topic) + extra
    env = mirror_env(database_url, bootstrap_servers, tmp_path, text, ddl)
    result = env.run("--once")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


TYPED_DDL = """
CREATE SCHEMA analytics;
CREATE TABLE analytics."Doc History" (
    doc uuid NOT NULL,
    body jsonb,
    seq bigint NOT NULL,
    starts timestamp NOT NULL,
    ends timestamp,
    live boolean NOT NULL,
    UNIQUE (doc, seq)
);
"""


def test_scd2_in_a_schema_with_json_uuid_and_timestamps_without_time_zone(
    database_url: str, bootstrap_servers: str, topic: str, tmp_path: Path
) -> None:
    mapping = f"""
[[tables]]
table = "analytics.Doc History"
topics = ["{topic}"]
history = "scd2"
history_columns = {{ valid_from = "starts", valid_to = "ends", is_current = "live" }}
key = {{ column = "doc" }}
version = {{ column = "seq", source = "header:outbox-seq" }}
[tables.columns]
body = "body"
"""
    env = mirror_env(database_url, bootstrap_servers, tmp_path, mapping, TYPED_DDL)
    doc = "6f1c1a52-3a9e-4c1b-9a51-7a2d0a3f1e10"
    producer = TxProducer(bootstrap_servers).producer
    producer.begin_transaction()
    for seq, body in ((1, {"a": [1]}), (2, None)):
        producer.produce(
            topic,
            json.dumps({"body": body}).encode(),
            doc.encode(),
            partition=0,
            headers=[("outbox-seq", str(seq).encode())],
            timestamp=int(at(seq).timestamp() * 1000),
        )
    producer.commit_transaction(30)
    result = env.run("--once")
    assert result.returncode == 0, result.stderr
    rows = env.sql(
        'SELECT doc::text, body, seq, starts, ends, live FROM analytics."Doc History" ORDER BY seq'
    )
    naive = [at(1).replace(tzinfo=None), at(2).replace(tzinfo=None)]
    assert rows == [
        (doc, {"a": [1]}, 1, naive[0], naive[1], False),
        (doc, None, 2, naive[1], None, True),
    ]


def test_a_changelog_unique_on_its_record_coordinates_applies_each_record_once(
    database_url: str, bootstrap_servers: str, topic: str, tmp_path: Path
) -> None:
    ddl = (
        "CREATE TABLE log (id int NOT NULL, qty int, seq bigint NOT NULL, op text NOT NULL, "
        "t text NOT NULL, p int NOT NULL, o bigint NOT NULL, UNIQUE (t, p, o))"
    )
    mapping = f"""
[[tables]]
table = "log"
topics = ["{topic}"]
history = "changelog"
key = {{ column = "id" }}
version = {{ column = "seq", source = "header:outbox-seq" }}
[tables.columns]
qty = "qty"
[tables.metadata]
t = "topic"
p = "partition"
o = "offset"
"""
    env = mirror_env(database_url, bootstrap_servers, tmp_path, mapping, ddl)
    produce(
        bootstrap_servers, topic, [(1, 5, 1, 0, None), (1, 5, 1, 0, None), (1, None, 2, 1, None)]
    )
    assert env.run("--once").returncode == 0
    env.sql("DELETE FROM mirror_offsets WHERE consumer_group = :g", g=env.group)
    assert env.run("--once").returncode == 0  # a replay adds nothing
    # The same version twice (a producer's retry as a new record) is two records here.
    assert env.sql("SELECT o, id, seq, op, qty FROM log ORDER BY o") == [
        (0, 1, 1, "upsert", 5),
        (1, 1, 1, "upsert", 5),
        (2, 1, 2, "delete", None),
    ]


def test_a_dead_letter_replayed_into_scd2_keeps_its_event_time(
    env: MirrorEnv, bootstrap_servers: str, topic: str
) -> None:
    """A dead letter keeps its record's Kafka timestamp: replayed into an scd2 table once
    the cause is fixed, the version is valid from its event time, as if applied at first."""
    env.sql("ALTER TABLE item_history ADD CONSTRAINT qty_positive CHECK (qty > 0)")
    produce(bootstrap_servers, topic, [(1, 10, 1, 0, None), (1, -1, 2, 7, None)])
    assert env.run("--once").returncode == 0
    stored = env.sql("SELECT error, kafka_timestamp FROM mirror_dead_letters")
    assert [(("qty_positive" in str(error)), moment) for error, moment in stored] == [(True, at(7))]

    env.sql("ALTER TABLE item_history DROP CONSTRAINT qty_positive")
    replayed = env.dead_letters("replay", "--all", "--yes")
    assert replayed.returncode == 0, replayed.stderr
    assert history(env) == [
        (1, 1, 10, at(0), at(7), False),
        (1, 2, -1, at(7), None, True),
    ]
    assert env.sql("SELECT kafka_ts FROM item_history WHERE seq = 2") == [(at(7),)]
