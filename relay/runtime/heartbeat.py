"""Heartbeat records: how the forward relay tells the consumers of a topic how complete it
is, and how the mirror reads them back (docs/mirror.md, "Freshness").

A heartbeat of relay partition ``p`` of an outbox database says: every outbox event of
``p`` whose transaction committed before ``complete_through`` is in the topic, at an
offset below this record in each partition (it is written in the same Kafka transaction
as the records it vouches for, or in a later one). One goes to every partition of each
heartbeat topic; the relay and the mirror share this wire format:

* header ``relay-heartbeat: 1`` (a consumer skips records that carry it);
* key ``relay-heartbeat-<database id>-<p>`` (a compacted topic keeps the latest);
* value, compact JSON: ``database_id``, ``relay_partition``, ``relay_partitions`` (the
  outbox's relay partition count), ``complete_through_ms`` (milliseconds since the epoch,
  on the outbox database's clock) and ``complete_through`` (the same, ISO 8601 UTC).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

HEARTBEAT_HEADER = "relay-heartbeat"
HEARTBEAT_HEADER_VALUE = b"1"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    database_id: str
    relay_partition: int
    relay_partitions: int
    complete_through_ms: int

    @property
    def key(self) -> bytes:
        return f"relay-heartbeat-{self.database_id}-{self.relay_partition}".encode()

    @property
    def complete_through(self) -> datetime:
        return datetime.fromtimestamp(self.complete_through_ms / 1000, UTC)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "database_id": self.database_id,
                "relay_partition": self.relay_partition,
                "relay_partitions": self.relay_partitions,
                "complete_through_ms": self.complete_through_ms,
                "complete_through": self.complete_through.isoformat(timespec="milliseconds"),
            },
            separators=(",", ":"),
        ).encode()


def decode_heartbeat(value: bytes | None) -> Heartbeat | None:
    """The heartbeat in a record's value; None when it is not one (malformed)."""
    try:
        found = json.loads(value or b"")
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    database_id = found.get("database_id")
    numbers = [found.get(name) for name in _NUMBERS]
    if not isinstance(database_id, str) or not database_id:
        return None
    whole = [n for n in numbers if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
    if len(whole) != len(numbers) or whole[0] >= whole[1]:
        return None
    return Heartbeat(database_id, whole[0], whole[1], whole[2])


_NUMBERS = ("relay_partition", "relay_partitions", "complete_through_ms")
