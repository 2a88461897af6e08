"""I4: replaying a topic from offset 0 into an existing mirror (mirror_offsets reset)
leaves the same final state; the version guard keeps every surviving row untouched
while older records are replayed, and dead letters are not written twice."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.integration.mirror_support import (
    ITEMS_DDL,
    Record,
    TxProducer,
    expected_items,
    item,
    items_mapping,
    last_stable_offsets,
    mirror_env,
    tombstone,
)

CHANGES_DDL = """
CREATE TABLE items_changes (op text, id integer, old_version bigint, new_version bigint);
CREATE FUNCTION items_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO items_changes VALUES (
    TG_OP,
    CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END,
    CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE OLD.version END,
    CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE NEW.version END);
  RETURN NULL;
END $$;
CREATE TRIGGER items_changes AFTER INSERT OR UPDATE OR DELETE ON items
FOR EACH ROW EXECUTE FUNCTION items_changes();
"""


def test_replay_from_offset_zero_leaves_the_same_state(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("mirror-replay", partitions=2)
    env = mirror_env(
        database_url, bootstrap_servers, tmp_path, items_mapping([topic]), ITEMS_DDL + CHANGES_DDL
    )
    history: list[tuple[int, dict[str, object] | None]] = []
    records: list[Record] = []
    for n in range(600):
        item_id = n % 60
        if n % 7 == 3:  # deleted, and some of them created again later
            history.append((item_id, None))
            records.append(tombstone(item_id))
        else:
            history.append((item_id, {"name": f"n{n}", "qty": n}))
            records.append(item(item_id, f"n{n}", n))
    records.insert(100, (b"7", b"{broken", []))  # one dead letter, to be kept once
    TxProducer(bootstrap_servers).in_transactions(topic, records, size=40)

    first = env.run("--once", "--batch-size", "64")
    assert first.returncode == 0, first.stderr
    state = env.sql("SELECT id, name, qty, version FROM items ORDER BY id")
    assert {int(str(r[0])): (r[1], r[2]) for r in state} == expected_items(history)
    survivors = {int(str(r[0])) for r in state}
    assert 0 < len(survivors) < 60  # some keys end deleted
    stable = last_stable_offsets(bootstrap_servers, topic)
    assert env.offsets() == stable

    env.sql("DELETE FROM items_changes")
    env.sql("DELETE FROM mirror_offsets WHERE consumer_group = :g", g=env.group)
    replay = env.run("--once", "--batch-size", "64")
    assert replay.returncode == 0, replay.stderr
    assert "mirrored 600 records" in replay.stdout

    assert env.sql("SELECT id, name, qty, version FROM items ORDER BY id") == state
    assert env.offsets() == stable
    changed = env.sql("SELECT op, id, old_version, new_version FROM items_changes")
    touched_survivors = sorted({int(str(c[1])) for c in changed} & survivors)
    assert touched_survivors == [], f"replayed records rewrote rows, e.g. {changed[:3]}"
    dead = env.sql("SELECT count(*), min(error) FROM mirror_dead_letters")
    assert dead[0][0] == 1 and "value is not JSON" in str(dead[0][1]), json.dumps(str(dead))
