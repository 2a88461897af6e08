"""Which topic the stored offsets belong to: a recreated topic, added partitions.

Each row of ``mirror_offsets`` records the topic id and partition count of the topic its
offset was taken from. :class:`TopicGuard` compares them with what Kafka says now:

* when partitions are assigned (every start, every rebalance, every Spark task), against
  every stored row of the topic: an offset of another topic id (the topic was deleted and
  created again under the same name, and starts again at offset 0) is refused with
  :class:`~relay.errors.MirroredTopicChangedError`. A row without an id (stored before
  migration 0008) adopts the topic's id with its next batch.
* before each batch, with a description of the topic made after the batch's last record
  was fetched: a topic created again while it is mirrored (the consumer would go on
  reading the new topic at the old position) is refused before anything of it is applied.
* partitions added move keys to other partitions, which the mirror applies independently:
  refused for a table whose versions are Kafka offsets (they order a key's records only
  within one partition), reported otherwise (docs/mirror.md, "Partitions added").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from relay.errors import ConfigurationError, MirroredTopicChangedError
from relay.mirroring.ports import TopicDirectory
from relay.mirroring.types import ResolvedTable, StoredOffset, TopicIdentity, TopicPartitionKey
from relay.runtime.clock import Clock, SystemClock

log = logging.getLogger(__name__)


def recreated_error(
    group: str, topic: str, old_id: str, identity: TopicIdentity, where: str
) -> MirroredTopicChangedError:
    return MirroredTopicChangedError(
        f"topic {topic} was deleted and created again: group {group} stored offsets of "
        f"topic id {old_id} ({where}), Kafka's {topic} is topic id {identity.topic_id}; "
        "nothing of it was applied. The mirrored tables may hold rows of the old topic "
        '(docs/mirror.md, "A recreated topic"); then `relay mirror --reset-recreated-topic '
        f"{topic}` makes the group apply the new topic from its offset 0"
    )


def grown_error(
    group: str, topic: str, before: int, identity: TopicIdentity, tables: Sequence[str]
) -> MirroredTopicChangedError:
    return MirroredTopicChangedError(
        f"topic {topic} grew from {before} to {identity.partitions} partitions since group "
        f"{group} stored its offsets, so keys moved to other partitions, and table "
        f"{', '.join(tables)} takes its versions from Kafka offsets, which order a key's "
        "records only within one partition; nothing was applied. Map a version the records "
        "carry (header:outbox-seq or a field), empty the table and replay the topic "
        '(docs/mirror.md, "Partitions added to a mirrored topic")'
    )


def offset_versioned(tables: Sequence[ResolvedTable], topic: str) -> tuple[str, ...]:
    """The tables fed by ``topic`` whose versions are Kafka offsets."""
    return tuple(
        t.table for t in tables if topic in t.mapping.topics and t.mapping.version.kind == "offset"
    )


def check_stored(
    group: str,
    topic: str,
    identity: TopicIdentity,
    stored: Mapping[int, StoredOffset],
    offset_tables: Sequence[str],
) -> None:
    """Refuse the stored offsets of ``topic`` (partition -> row, every row of the group's
    topic) when they belong to another topic id, or when the topic has grown and
    ``offset_tables`` take their versions from Kafka offsets."""
    others = {
        p: s for p, s in sorted(stored.items()) if s.topic_id not in (None, identity.topic_id)
    }
    if others:
        old_id = next(iter(others.values())).topic_id or ""
        where = ", ".join(f"{topic}[{p}] at {s.next_offset}" for p, s in list(others.items())[:4])
        raise recreated_error(group, topic, old_id, identity, where)
    counts = [s.partitions for s in stored.values() if s.partitions is not None]
    if offset_tables and counts and min(counts) < identity.partitions:
        raise grown_error(group, topic, min(counts), identity, offset_tables)


def grown_warning(group: str, topic: str, before: int, identity: TopicIdentity) -> str:
    return (
        f"topic {topic} grew from {before} to {identity.partitions} partitions since group "
        f"{group} stored an offset of it: a key's records written before and after may be "
        "in two partitions, applied independently. Versions keep upserts in order; a key "
        "deleted by a newer record may come back with an older state until its next record "
        '(docs/mirror.md, "Partitions added to a mirrored topic")'
    )


@dataclass(frozen=True, slots=True)
class StaleOffset:
    """A stored offset ``relay mirror --reset-recreated-topic`` moves to the new topic."""

    partition: int
    stored: StoredOffset


def stale_offsets(
    topic: str, identity: TopicIdentity, stored: Mapping[TopicPartitionKey, StoredOffset]
) -> tuple[StaleOffset, ...]:
    """The group's stored offsets of ``topic`` that are not of its current topic id
    (those without an id included: the operator says they are of the old topic)."""
    return tuple(
        StaleOffset(p, s)
        for (t, p), s in sorted(stored.items())
        if t == topic and s.topic_id != identity.topic_id
    )


@dataclass(frozen=True, slots=True)
class TopicReset:
    """``relay mirror --reset-recreated-topic``: the stored offsets of the topic's old id
    (or of none) that move, or moved, to offset 0 of its current id."""

    topic: str
    identity: TopicIdentity
    stale: tuple[StaleOffset, ...]
    notes: tuple[str, ...]  # what the mirrored tables keep of the old topic
    done: bool
    group: str  # the mirror's consumer group

    def lines(self) -> list[str]:
        new_id = self.identity.topic_id
        if not self.stale:
            return [
                f"{self.topic}: every stored offset of group {self.group} is of topic id {new_id}"
            ]
        return [
            f"{self.topic}[{s.partition}]: offset {s.stored.next_offset} of topic id "
            f"{s.stored.topic_id or '(none recorded)'} -> offset 0 of topic id {new_id}"
            for s in self.stale
        ] + [f"note: {note}" for note in self.notes]


def reset_notes(
    topic: str, tables: Sequence[ResolvedTable], filled: Sequence[str]
) -> tuple[str, ...]:
    """What the mirrored tables of ``topic`` hold after a reset; ``filled``: the tables
    that have rows. Raises ConfigurationError when a table that takes its versions from
    Kafka offsets has rows: they would keep the new topic's records from applying."""
    blocked = [
        t.table for t in tables if t.table in filled and t.table in offset_versioned(tables, topic)
    ]
    if blocked:
        raise ConfigurationError(
            f"table {', '.join(blocked)} takes its versions from Kafka offsets and holds rows of "
            f"the old topic {topic}: records of the new topic (offsets from 0) would not "
            "replace them. Empty it first (it has no other topic), then reset; nothing changed"
        )
    return tuple(
        f"table {t.table} keeps its rows of the old topic: a record of the new one replaces a "
        f"row only with a higher version ({t.mapping.version.describe()}), and keys the new "
        "topic never mentions keep their rows; delete them first to start from the new topic"
        for t in tables
        if t.table in filled
    )


class TopicGuard:
    """Checks the stored offsets and each batch against the topics as Kafka has them."""

    def __init__(
        self,
        directory: TopicDirectory,
        group: str,
        tables: Sequence[ResolvedTable],
        clock: Clock | None = None,
    ) -> None:
        self._directory = directory
        self._group = group
        self._tables = tuple(tables)
        self._clock = clock or SystemClock()
        self._seen: dict[str, tuple[TopicIdentity, float]] = {}
        self._warned: set[tuple[str, int]] = set()

    def assigned(
        self,
        partitions: Sequence[TopicPartitionKey],
        stored: Mapping[TopicPartitionKey, StoredOffset],
    ) -> dict[str, TopicIdentity]:
        """Each assigned topic's identity now, after checking every stored offset of it."""
        topics = sorted({topic for topic, _ in partitions})
        identities = self._describe(topics)
        for topic in topics:
            identity = identities[topic]
            rows = {p: s for (t, p), s in stored.items() if t == topic}
            check_stored(self._group, topic, identity, rows, offset_versioned(self._tables, topic))
            behind = [
                s.partitions
                for (t, p), s in stored.items()
                if t == topic and (t, p) in partitions and s.partitions is not None
            ]
            if behind and min(behind) < identity.partitions:
                self._warn(topic, min(behind), identity)
        return identities

    def verify(self, topic: str, known: TopicIdentity, since: float) -> TopicIdentity:
        """The topic as described at or after ``since`` (monotonic: when the batch's last
        record arrived); refused when it is another topic than ``known`` or has grown
        under a table versioned by offsets."""
        seen = self._seen.get(topic)
        identity = self._describe([topic])[topic] if seen is None or seen[1] < since else seen[0]
        if identity.topic_id != known.topic_id:
            raise MirroredTopicChangedError(
                f"topic {topic} was deleted and created again while group {self._group} "
                f"mirrored it (topic id {known.topic_id} -> {identity.topic_id}); the records "
                "read since were not applied. The mirrored tables may hold rows of the old "
                'topic (docs/mirror.md, "A recreated topic"); then `relay mirror '
                f"--reset-recreated-topic {topic}` makes the group apply the new topic from "
                "its offset 0"
            )
        if identity.partitions > known.partitions:
            tables = offset_versioned(self._tables, topic)
            if tables:
                raise grown_error(self._group, topic, known.partitions, identity, tables)
            self._warn(topic, known.partitions, identity)
        return identity

    def _describe(self, topics: Sequence[str]) -> dict[str, TopicIdentity]:
        at = self._clock.monotonic()  # before asking: the answer is at least this recent
        identities = self._directory.describe(topics)
        for topic in topics:
            self._seen[topic] = (identities[topic], at)
        return identities

    def _warn(self, topic: str, before: int, identity: TopicIdentity) -> None:
        if (topic, identity.partitions) not in self._warned:
            self._warned.add((topic, identity.partitions))
            log.warning("%s", grown_warning(self._group, topic, before, identity))
