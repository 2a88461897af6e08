"""Small value types of the replicator's core and its adapters."""

from __future__ import annotations

from dataclasses import dataclass

from relay.runtime.stamps import read_stamp, stamp

Headers = tuple[tuple[str, bytes | None], ...]

SOURCE_CLUSTER_HEADER = "relay-source-cluster"
SOURCE_TOPIC_HEADER = "relay-source-topic"
SOURCE_PARTITION_HEADER = "relay-source-partition"
SOURCE_OFFSET_HEADER = "relay-source-offset"
PROVENANCE_HEADERS = (
    SOURCE_CLUSTER_HEADER,
    SOURCE_TOPIC_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_OFFSET_HEADER,
)
"""Headers every replicated record gets, after its own: where it was copied from."""


@dataclass(frozen=True, slots=True)
class Route:
    """One source partition and where it is copied to: the same partition of
    ``target_topic`` on the target cluster."""

    topic: str
    partition: int
    target_topic: str

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One committed record of a source partition, as the replicator copies it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int  # 0: none (the target's producer stamps it)


@dataclass(frozen=True, slots=True)
class Origin:
    """Which source a replicated partition's position belongs to: the source cluster (its
    alias) and topic. Every position the replicator commits carries it (the offset's
    metadata); a position read back with another origin is refused."""

    cluster: str
    topic: str

    def stamp(self) -> str:
        return stamp(cluster=self.cluster, topic=self.topic)

    @classmethod
    def from_stamp(cls, text: str | None) -> Origin | None:
        found = read_stamp(text, ("cluster", "topic"))
        return None if found is None else cls(*found)


@dataclass(frozen=True, slots=True)
class ReplicaPosition:
    """A replicated partition's position as the target cluster holds it: the next source
    offset to copy (0 when nothing was copied) and whose it is (None: no position)."""

    next_offset: int
    origin: Origin | None = None


@dataclass(frozen=True, slots=True)
class ReplicaBatch:
    """What one target transaction copied from one source partition."""

    records: int
    first_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class ReplicaResult:
    """What a source partition's copy did during one run."""

    topic: str
    partition: int
    target_topic: str
    records: int
    batches: int
    next_offset: int
