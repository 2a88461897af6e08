"""The heartbeat records' wire format (relay.runtime.heartbeat)."""

import json

import pytest

from relay.runtime.heartbeat import Heartbeat, decode_heartbeat


def test_a_heartbeat_reads_back_as_written() -> None:
    beat = Heartbeat("db-1", 3, 8, 1_790_000_000_123)
    assert decode_heartbeat(beat.encode()) == beat
    assert beat.key == b"relay-heartbeat-db-1-3"
    assert json.loads(beat.encode())["complete_through"] == "2026-09-21T14:13:20.123+00:00"


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"not json",
        b"[]",
        b'{"relay_partition": 0, "relay_partitions": 1, "complete_through_ms": 5}',
        b'{"database_id": "d", "relay_partition": 1, "relay_partitions": 1, '
        b'"complete_through_ms": 5}',
        b'{"database_id": "d", "relay_partition": 0, "relay_partitions": 1, '
        b'"complete_through_ms": true}',
        b'{"database_id": "d", "relay_partition": -1, "relay_partitions": 1, '
        b'"complete_through_ms": 5}',
    ],
)
def test_a_malformed_heartbeat_is_none(value: bytes | None) -> None:
    assert decode_heartbeat(value) is None
