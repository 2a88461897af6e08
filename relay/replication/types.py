"""Small value types of the replicator's core and its adapters."""

from __future__ import annotations

from dataclasses import dataclass

from relay.runtime.stamps import read_fields, read_stamp, stamp

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


@dataclass(slots=True)
class SourceRecord:
    """One committed record of a source partition, as the replicator copies it. Never
    changed once read; not ``frozen`` only because a frozen dataclass's ``__init__`` costs
    about four times as much (~1 us), once per record copied."""

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
class PositionStamp:
    """What a position's metadata says of it: its :class:`Origin`, and (since these were
    recorded) the source cluster's id and topic id it counts offsets of, the target
    topic id its copies went to, the transactional-id prefix of the replicators that
    commit it, and ``since``: the first target offset of copies of this source topic id
    (the copies below it are of a topic deleted since); ``as_of_ms``: a time the position
    is complete through (every record a read_committed consumer of the source partition
    could see then is below it; relay.replication.freshness). None: not recorded."""

    origin: Origin
    cluster_id: str | None = None
    topic_id: str | None = None
    target_id: str | None = None
    prefix: str | None = None
    since: int = 0
    as_of_ms: int | None = None

    def text(self) -> str:
        fields = {
            "cluster": self.origin.cluster,
            "topic": self.origin.topic,
            "cluster_id": self.cluster_id,
            "topic_id": self.topic_id,
            "target_id": self.target_id,
            "prefix": self.prefix,
            "since": str(self.since) if self.since else None,
            "as_of": None if self.as_of_ms is None else str(self.as_of_ms),
        }
        return stamp(**{k: v for k, v in fields.items() if v is not None})

    @classmethod
    def from_text(cls, text: str | None) -> PositionStamp | None:
        origin = Origin.from_stamp(text)
        if origin is None:
            return None
        found = read_fields(text)
        since, as_of = found.get("since", "0"), found.get("as_of", "")
        return cls(
            origin,
            found.get("cluster_id"),
            found.get("topic_id"),
            found.get("target_id"),
            found.get("prefix"),
            int(since) if since.isdigit() else 0,
            int(as_of) if as_of.isdigit() else None,
        )


@dataclass(frozen=True, slots=True)
class ReplicaPosition:
    """A replicated partition's position as the target cluster holds it: the next source
    offset to copy (0 when nothing was copied), whose it is (None: not stamped) and
    whether there is one at all (``exists``: False when the group has none)."""

    next_offset: int
    stamp: PositionStamp | None = None
    exists: bool = True

    @property
    def origin(self) -> Origin | None:
        return None if self.stamp is None else self.stamp.origin


NO_POSITION = ReplicaPosition(0, None, exists=False)


@dataclass(frozen=True, slots=True)
class LastCopy:
    """The last committed copy in a target partition (at or after a stamp's ``since``):
    its target offset and the source it names in its provenance headers."""

    target_offset: int
    cluster: str
    topic: str
    source_offset: int

    @property
    def floor(self) -> int:
        """The position the copies say: the source offset after the last one copied."""
        return self.source_offset + 1


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
