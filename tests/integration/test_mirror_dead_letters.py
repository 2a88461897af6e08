"""I5: records that cannot be decoded, mapped or stored end in mirror_dead_letters, with
their raw bytes and the reason, in the transaction that moves the offset past them; the
good records of the same batches still apply, and nothing is lost."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.integration.mirror_support import (
    Record,
    TxProducer,
    audit_count,
    item,
    items_mapping,
    last_stable_offsets,
    mirror_env,
)

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
