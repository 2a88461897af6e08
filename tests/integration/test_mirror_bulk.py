"""A batch applied in bulk (COPY into a staging table, a few set-based statements) gives
what applying its records one by one gives: duplicates of a key with versions out of
order, equal versions, a delete and a re-insert in one batch, a changelog fed by the same
records, and a bad record in a big batch dead-lettered alone while the rest applies.

Each mirrored table counts the INSERT statements run on it (a statement-level trigger):
record by record that is one per upsert record, in bulk a handful per batch."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.integration.mirror_support import (
    MirrorEnv,
    Record,
    TxProducer,
    last_stable_offsets,
    mirror_env,
)

BULK_DDL = """
CREATE TABLE items (
    id integer PRIMARY KEY,
    name text NOT NULL,
    qty integer NOT NULL CHECK (qty >= 0),
    version bigint NOT NULL,
    note text NOT NULL DEFAULT 'new'          -- not mapped: a default on insert only
);
CREATE TABLE item_log (
    id integer NOT NULL, name text, qty integer, version bigint NOT NULL, op text NOT NULL,
    UNIQUE (id, version)
);
CREATE TABLE attempts (id integer NOT NULL, version bigint NOT NULL, name text);
CREATE TABLE statements (table_name text NOT NULL);
CREATE FUNCTION attempt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO attempts VALUES (NEW.id, NEW.version, NEW.name);
  RETURN NEW;
END $$;
CREATE TRIGGER items_attempt BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION attempt();
CREATE FUNCTION statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO statements VALUES (TG_TABLE_NAME);
  RETURN NULL;
END $$;
CREATE TRIGGER items_statement AFTER INSERT ON items
FOR EACH STATEMENT EXECUTE FUNCTION statement();
CREATE TRIGGER item_log_statement AFTER INSERT ON item_log
FOR EACH STATEMENT EXECUTE FUNCTION statement();
"""


def mapping(topic: str) -> str:
    return f"""
[[tables]]
table = "items"
topics = ["{topic}"]
key = {{ column = "id" }}
version = {{ column = "version", source = "header:ver" }}
[tables.columns]
name = "name"
qty = "qty"

[[tables]]
table = "item_log"
topics = ["{topic}"]
history = "changelog"
key = {{ column = "id" }}
version = {{ column = "version", source = "header:ver" }}
[tables.columns]
name = "name"
qty = "qty"
"""


def put(item_id: int, version: int, name: str, qty: int = 1) -> Record:
    value = json.dumps({"name": name, "qty": qty}).encode()
    return (str(item_id).encode(), value, [("ver", str(version).encode())])


def gone(item_id: int, version: int) -> Record:
    return (str(item_id).encode(), None, [("ver", str(version).encode())])


def setup(
    database_url: str, bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> tuple[MirrorEnv, str]:
    topic = make_topic("mirror-bulk", partitions=1)
    return mirror_env(database_url, bootstrap, tmp_path, mapping(topic), BULK_DDL), topic


def statements(env: MirrorEnv, table: str) -> int:
    return int(str(env.sql("SELECT count(*) FROM statements WHERE table_name = :t", t=table)[0][0]))


def items(env: MirrorEnv) -> dict[int, tuple[str, int, str]]:
    rows = env.sql("SELECT id, name, version, note FROM items")
    return {int(str(i)): (str(n), int(str(v)), str(note)) for i, n, v, note in rows}


def test_duplicates_out_of_order_equal_versions_and_re_inserts_in_one_batch(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    env, topic = setup(database_url, bootstrap_servers, make_topic, tmp_path)
    env.sql(  # rows from before, with the unmapped column changed by hand
        "INSERT INTO items VALUES (4, 'old4', 1, 1, 'kept'), (5, 'old5', 1, 1, 'kept'), "
        "(6, 'old6', 1, 8, 'kept'), (7, 'old7', 1, 1, 'kept')"
    )
    env.sql("DELETE FROM attempts")
    env.sql("DELETE FROM statements")
    records = [put(100 + n, 1, f"filler{n}") for n in range(300)]  # a batch of many keys
    records[10:10] = [put(1, 5, "v5"), put(1, 3, "v3"), put(1, 7, "v7"), put(1, 6, "v6")]
    records[50:50] = [put(2, 4, "first"), put(2, 4, "second")]  # equal: the first one wins
    records[60:60] = [put(3, 2, "up"), gone(3, 2)]  # equal: the delete after it wins
    records[70:70] = [put(4, 2, "v2"), gone(4, 3), put(4, 4, "again")]  # a new row: default
    records[80:80] = [put(5, 2, "updated")]  # updated in place: the hand-made note stays
    records[90:90] = [gone(6, 9), put(6, 3, "late")]  # an older upsert after a delete
    records[99:99] = [gone(7, 1), put(7, 1, "back")]  # deleted, and back at the same version
    TxProducer(bootstrap_servers).transaction(topic, records)

    result = env.run("--once", "--batch-size", "2000")
    assert result.returncode == 0, result.stderr

    state = items(env)
    assert {k: v for k, v in state.items() if k < 100} == {
        1: ("v7", 7, "new"),
        2: ("first", 4, "new"),
        4: ("again", 4, "new"),
        5: ("updated", 2, "kept"),
        6: ("late", 3, "new"),
        7: ("back", 1, "new"),
    }
    assert len(state) == 6 + 300
    # Every upsert record reached the table once (its row trigger fired), in record order.
    upserts = [r for r in records if r[1] is not None]
    assert env.sql("SELECT count(*) FROM attempts") == [(len(upserts),)]
    assert env.sql("SELECT name FROM attempts WHERE id = 1 ORDER BY version") == [
        ("v3",),
        ("v5",),
        ("v6",),
        ("v7",),
    ]
    # The changelog keeps each (id, version) once: the first record of it.
    log = dict(
        ((int(str(i)), int(str(v))), (n, str(op)))
        for i, v, n, op in env.sql("SELECT id, version, name, op FROM item_log WHERE id < 100")
    )
    assert log[(2, 4)] == ("first", "upsert")
    assert log[(3, 2)] == ("up", "upsert")
    assert log[(7, 1)] == (None, "delete")
    assert len(log) == 13
    assert env.sql("SELECT count(*) FROM item_log") == [(313,)]
    # In bulk: an INSERT statement per round (4: key 1 has 4 records) and batch, not
    # one per record.
    assert 0 < statements(env, "items") < 10
    assert 0 < statements(env, "item_log") < 3
    assert env.offsets() == last_stable_offsets(bootstrap_servers, topic)


def test_a_bad_record_in_a_big_batch_is_dead_lettered_alone(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    env, topic = setup(database_url, bootstrap_servers, make_topic, tmp_path)
    records = [put(n, 1, f"n{n}") for n in range(1000)]
    records += [put(n, 2, f"m{n}") for n in range(0, 1000, 2)]
    records.insert(1200, put(7, 3, "refused", qty=-1))  # the CHECK constraint refuses it
    records.append(put(7, 4, "after"))
    TxProducer(bootstrap_servers).transaction(topic, records)

    result = env.run("--once", "--batch-size", "2000")
    assert result.returncode == 0, result.stderr

    dead = env.sql('SELECT "offset", error FROM mirror_dead_letters')
    assert [offset for offset, _ in dead] == [1200]
    assert "check constraint" in str(dead[0][1])
    state = items(env)
    assert len(state) == 1000
    assert state[7] == ("after", 4, "new")
    assert state[6] == ("m6", 2, "new") and state[5] == ("n5", 1, "new")
    assert env.sql("SELECT count(*) FROM attempts") == [(len(records) - 1,)]
    assert env.sql("SELECT count(*) FROM item_log") == [(len(records) - 1,)]
    assert env.offsets() == last_stable_offsets(bootstrap_servers, topic)
