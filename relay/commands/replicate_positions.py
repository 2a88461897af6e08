"""Putting the replicator's positions right after an operator's change, as a typed API:
`relay replicate --reset-recreated-topic TOPIC` (a source topic deleted and created again
is copied from its first offset) and `relay replicate --restore-positions` (each position
set from the target partition's last copy, after the group's offsets were deleted,
expired or moved). Each partition is fenced first, through its own transactional id, and
the new position is committed by that producer (docs/replication.md, "When the positions
do not fit")."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from relay.commands.replicate import ReplicaTask, plan_replication
from relay.errors import ConfigurationError
from relay.kafka.replica_copies import KafkaTopicIds, copied_from_source
from relay.kafka.replica_writer import KafkaReplicaWriter
from relay.replication.startup import described_stamp
from relay.replication.types import LastCopy, Origin, PositionStamp, ReplicaPosition
from relay.runtime.clock import SystemClock
from relay.settings.replicate import ReplicateSettings

log = logging.getLogger(__name__)
_POLICY = "cleanup.policy"


@dataclass(frozen=True, slots=True)
class PositionsChange:
    """What a command changes (``done``) or would change: one line per partition."""

    lines: tuple[str, ...]
    changes: int
    done: bool


@dataclass(frozen=True, slots=True)
class _Partition:
    task: ReplicaTask
    writer: KafkaReplicaWriter
    committed: ReplicaPosition
    mine: PositionStamp  # this replicator's stamp, with the topics' ids now
    compacted: bool  # the source topic's cleanup.policy compacts


def _partitions(
    settings: ReplicateSettings, chosen: Callable[[ReplicaTask], bool]
) -> Iterator[_Partition]:
    plan = plan_replication(settings)
    settings = settings.with_group(plan.group)
    ids, clock = KafkaTopicIds(settings), SystemClock()
    compacted = {t.topic for t in plan.topics if "compact" in dict(t.configs).get(_POLICY, "")}
    for task in plan.tasks():
        if not chosen(task):
            continue
        route = task.route
        origin = Origin(task.source_alias, route.topic)
        writer = KafkaReplicaWriter(settings, route, origin, task.max_message_bytes)
        try:
            committed = writer.fence()
            now = clock.monotonic()
            mine = described_stamp(
                origin, route, ids, now, cluster_id=task.cluster_id, prefix=settings.prefix
            )
            yield _Partition(task, writer, committed, mine, route.topic in compacted)
        finally:
            writer.close()


def _commit(part: _Partition, next_offset: int, stamp: PositionStamp) -> None:
    part.writer.begin()
    part.writer.commit(next_offset, stamp)
    log.info("%s: position %d committed (%s)", part.task.route, next_offset, stamp.text())


def reset_recreated_topic(settings: ReplicateSettings, topic: str, *, yes: bool) -> PositionsChange:
    """Move the positions of ``topic``'s partitions that count offsets of another topic id
    (or of none recorded) to offset 0 of its current id; copies already on the target
    stay, and the floor starts after them. Without ``yes``, only say which."""
    lines: list[str] = []
    changes = 0
    for part in _partitions(settings, lambda task: task.route.topic == topic):
        route, committed, mine = part.task.route, part.committed, part.mine
        old = committed.stamp
        if old is not None and old.topic_id == mine.topic_id:
            lines.append(f"{route}: position of topic id {mine.topic_id}, nothing to reset")
            continue
        if committed.exists:
            old_id = "(none recorded)" if old is None or old.topic_id is None else old.topic_id
            before = f"offset {committed.next_offset} of topic id {old_id}"
        elif (copy := part.writer.last_copy(0)) is not None:  # the group lost it too
            before = f"no position (copies up to source offset {copy.source_offset})"
        else:
            lines.append(f"{route}: no position and no copies, nothing to reset")
            continue
        lines.append(f"{route}: {before} -> offset 0 of topic id {mine.topic_id}")
        changes += 1
        if yes:
            since = part.writer.stable_end()  # the copies of the old topic end here
            _commit(part, 0, replace(mine, since=since))
    if not lines:
        raise ConfigurationError(
            f"topic {topic} is not among the selected source topics: nothing to reset"
        )
    return PositionsChange(tuple(lines), changes, yes and changes > 0)


def _of_the_source(settings: ReplicateSettings, part: _Partition, copy: LastCopy) -> bool:
    """Whether ``copy`` may be a copy of what the source partition holds now (not of a
    topic of the same name deleted since)."""
    settings = settings.with_group(part.task.group)
    found = copied_from_source(settings, part.task.route, copy, compacted=part.compacted)
    return found is not False


def restore_positions(settings: ReplicateSettings, *, yes: bool) -> PositionsChange:
    """Set each selected partition's position to the one its target copies say (the
    source offset after its last copy) where it differs or is missing, unless that copy is
    not of the record the source holds at its offset now (a topic created again: left to
    ``reset_recreated_topic``). Without ``yes``, only say which."""
    lines: list[str] = []
    changes = 0
    for part in _partitions(settings, lambda task: True):
        route, committed, mine = part.task.route, part.committed, part.mine
        old = committed.stamp
        same_target = old is not None and old.target_id in (None, mine.target_id)
        since = old.since if old is not None and same_target else 0
        copy = part.writer.last_copy(since)
        before = f"position {committed.next_offset}" if committed.exists else "no position"
        if copy is None:
            lines.append(f"{route}: {before}, no copies on {route.target_topic}: left alone")
        elif (copy.cluster, copy.topic) != (mine.origin.cluster, route.topic):
            lines.append(
                f"{route}: {route.target_topic} holds copies of source {copy.cluster!r} topic "
                f"{copy.topic!r}: left alone"
            )
        elif committed.exists and committed.next_offset == copy.floor:
            lines.append(f"{route}: {before}, as its copies say")
        elif not _of_the_source(settings, part, copy):
            lines.append(
                f"{route}: {before}; its last copy (source offset {copy.source_offset}) is not "
                "the record the source holds at that offset now: the source topic was created "
                "again since it was copied; left alone: `relay replicate "
                f"--reset-recreated-topic {route.topic}` copies the new topic from its first "
                "offset"
            )
        else:
            lines.append(
                f"{route}: {before} -> {copy.floor} (its last copy: source offset "
                f"{copy.source_offset} at {route.target_topic}[{route.partition}] offset "
                f"{copy.target_offset})"
            )
            changes += 1
            if yes:
                _commit(part, copy.floor, replace(mine, since=since))
    return PositionsChange(tuple(lines), changes, yes and changes > 0)
