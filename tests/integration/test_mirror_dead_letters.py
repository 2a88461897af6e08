"""I5: records that cannot be decoded, mapped or stored end in mirror_dead_letters, with
their raw bytes and the reason, in the transaction that moves the offset past them; the
good records of the same batches still apply, and nothing is lost."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from tests.integration.mirror_support import (
    ITEMS_DDL,
    Record,
    TxProducer,
    audit_count,
    item,
    items_mapping,
    last_stable_offsets,
    mirror_env,
)
from tests.integration.support import wait_until

# (key, value, headers) -> the reason the dead letter must give
BAD: list[tuple[Record, str]] = [
    ((b"1", b"{not json", []), "value is not JSON"),
    ((None, json.dumps({"name": "a", "qty": 1}).encode(), []), "record has no key"),
    ((b"2", json.dumps({"name": "b"}).encode(), []), "missing field 'qty'"),
    ((b"3", json.dumps({"name": "c", "qty": "ten"}).encode(), []), "field 'qty' is a string"),
    ((b"4", json.dumps([1, 2]).encode(), []), "value is JSON list, not an object"),
    ((b"x5", json.dumps({"name": "d", "qty": 1}).encode(), []), "key 'x5' is not an integer"),
    ((b"6", json.dumps({"name": "e", "qty": -1}).encode(), []), "check constraint"),
    ((b"7", json.dumps({"name": None, "qty": 1}).encode(), []), "not-null constraint"),
    ((b"8", json.dumps({"name": "f", "qty": 2**40}).encode(), []), "out of range"),
    ((b"9", b"\xff\xfe{", [("trace", b"\x00\x01")]), "value is not JSON"),
    ((b"10", json.dumps({"name": "nul\u0000", "qty": 1}).encode(), []), "NUL"),
]


def test_bad_records_are_dead_lettered_and_the_rest_applies(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("mirror-dead", partitions=2)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    records: list[Record] = [item(100 + n, f"good{n}", n) for n in range(400)]
    for i, (bad, _reason) in enumerate(BAD):
        records.insert(7 + 35 * i, bad)
    TxProducer(bootstrap_servers).in_transactions(topic, records, size=50)
    expected_reasons = {(r[0], r[1]): reason for r, reason in BAD}

    result = env.run("--once", "--batch-size", "64")
    assert result.returncode == 0, result.stderr
    assert f"dead-lettered {len(BAD)}" in result.stdout
    assert "records dead-lettered" in result.stderr  # a warning per batch that had any

    dead = env.sql(
        'SELECT topic, partition, "offset", key, value, headers, error FROM mirror_dead_letters'
    )
    assert len(dead) == len(BAD)
    for topic_name, _partition, _offset, key, value, headers, error in dead:
        assert topic_name == topic
        raw_key = bytes(key) if key is not None else None  # type: ignore[arg-type]
        raw_value = bytes(value) if value is not None else None  # type: ignore[arg-type]
        assert expected_reasons[(raw_key, raw_value)] in str(error), error
        if raw_value == b"\xff\xfe{":
            assert headers == [{"name": "trace", "base64": "AAE="}]
    # Nothing lost: every record is applied or dead-lettered, offsets are past all of them.
    assert audit_count(env) + len(dead) == len(records)
    assert env.sql("SELECT count(*) FROM items") == [(400,)]
    assert env.offsets() == last_stable_offsets(bootstrap_servers, topic)


LIMITS_DDL = (
    ITEMS_DDL
    + """
CREATE INDEX items_name ON items (name);
CREATE FUNCTION items_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.name = 'refused-by-trigger' THEN
    RAISE EXCEPTION USING MESSAGE = 'item names may not be ' || NEW.name;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER items_refuse BEFORE INSERT OR UPDATE ON items
FOR EACH ROW EXECUTE FUNCTION items_refuse();
"""
)


def test_records_the_database_refuses_for_good_are_dead_lettered_not_retried_for_ever(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """An index row too large (54000) and an exception from a user's trigger (P0001) are
    the record's fault: dead letters, and the mirror goes on (exit 0)."""
    topic = make_topic("mirror-limits", partitions=1)
    env = mirror_env(
        database_url, bootstrap_servers, tmp_path, items_mapping([topic]), ddl=LIMITS_DDL
    )
    huge = os.urandom(6000).hex()  # ~12 kB that do not compress: past the btree row limit
    records = [item(n, f"good{n}", n) for n in range(20)]
    records.insert(5, item(1000, huge, 1))
    records.insert(12, item(1001, "refused-by-trigger", 1))
    TxProducer(bootstrap_servers).in_transactions(topic, records, size=50)

    result = env.run("--once", RELAY_MIRROR_RECORD_RETRIES="2")
    assert result.returncode == 0, result.stderr
    dead = dict(env.sql("SELECT convert_from(key, 'UTF8'), error FROM mirror_dead_letters"))  # type: ignore[arg-type]
    assert set(dead) == {"1000", "1001"}
    assert "SQLSTATE 54000" in str(dead["1000"])
    assert "SQLSTATE P0001" in str(dead["1001"])
    assert env.sql("SELECT count(*) FROM items") == [(20,)]


PARENTS_DDL = (
    ITEMS_DDL
    + """
CREATE TABLE parents (id integer PRIMARY KEY);
ALTER TABLE items ADD CONSTRAINT items_parent FOREIGN KEY (qty) REFERENCES parents (id);
"""
)


def test_a_child_that_arrives_before_its_parent_is_retried_until_the_parent_exists(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A foreign-key violation (23503) may heal when the parent arrives (from another
    topic, another partition): the mirror retries it with backoff before giving up on it."""
    topic = make_topic("mirror-parents", partitions=1)
    env = mirror_env(
        database_url, bootstrap_servers, tmp_path, items_mapping([topic]), ddl=PARENTS_DDL
    )
    env.sql("INSERT INTO parents VALUES (1)")
    TxProducer(bootstrap_servers).in_transactions(
        topic, [item(1, "has a parent", 1), item(2, "parent later", 2), item(3, "after", 1)]
    )
    log = tmp_path / "mirror.log"
    service = env.start(log, RELAY_MIRROR_RECORD_RETRIES="1000")
    try:
        wait_until(lambda: "SQLSTATE 23503" in log.read_text(), 60, "the first FK failure")
        env.sql("INSERT INTO parents VALUES (2)")
        wait_until(
            lambda: env.sql("SELECT count(*) FROM items") == [(3,)], 60, "the child to apply"
        )
    finally:
        service.terminate()
        service.wait(60)
    assert env.sql("SELECT count(*) FROM mirror_dead_letters") == [(0,)]


def test_a_child_whose_parent_never_arrives_is_dead_lettered_after_its_retries(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("mirror-orphans", partitions=1)
    env = mirror_env(
        database_url, bootstrap_servers, tmp_path, items_mapping([topic]), ddl=PARENTS_DDL
    )
    env.sql("INSERT INTO parents VALUES (1)")
    TxProducer(bootstrap_servers).in_transactions(
        topic, [item(1, "has a parent", 1), item(2, "orphan", 7), item(3, "after", 1)]
    )
    result = env.run("--once", RELAY_MIRROR_RECORD_RETRIES="2")
    assert result.returncode == 0, result.stderr
    dead = env.sql("SELECT convert_from(key, 'UTF8'), error FROM mirror_dead_letters")
    assert [row[0] for row in dead] == ["2"]
    assert "SQLSTATE 23503" in str(dead[0][1])
    assert "after 2 attempts" in str(dead[0][1])
    assert env.sql("SELECT id FROM items ORDER BY id") == [(1,), (3,)]
