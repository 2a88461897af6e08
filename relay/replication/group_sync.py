"""Continuous consumer failover: which translated offsets a sync commits for a group on the
target cluster, and which it leaves alone (``relay replicate --sync-groups``).

Each round translates the group's committed source offsets as ``--translate-group`` does
(:mod:`relay.replication.translation`): the offset of the first copy whose
``relay-source-offset`` is the committed offset or more, searched below the target
partition's last stable offset, so a synced offset never points past the copies the
target has committed (that would skip records). A partition not replicated up to the
group's offset yet is left as it is until the replicator has copied that far.

**Never backwards, unless the source went back.** The target offset moves forward
whenever the translation moves forward. It moves back only when the group's offset on the
*source* went back below the source offset the target's committed offset was synced from
(its metadata, ``relay replicate: T[p]@S``, :func:`sync_metadata`), e.g. the group was
reset on the source to process records again. A target offset without that metadata, or
synced from the same or a lower source offset, was moved there by something else (the
group's consumers on the target, after a failover): a sync never takes it back, so a
stale source group cannot rewind consumers that already moved to the target.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from relay.replication.translation import TranslatedOffset

_METADATA = re.compile(r"relay replicate: (?P<topic>.+)\[(?P<partition>\d+)\]@(?P<offset>\d+)")


def sync_metadata(topic: str, partition: int, source_offset: int | None) -> str:
    """The metadata a synced (or translated) offset is committed with on the target: the
    source partition and the source offset it was translated from."""
    return f"relay replicate: {topic}[{partition}]@{source_offset}"


def synced_from(metadata: str | None, topic: str, partition: int) -> int | None:
    """The source offset of ``topic[partition]`` that a target offset committed with
    ``metadata`` was translated from; None when something else committed it."""
    found = _METADATA.fullmatch(metadata or "")
    if found is None or (found["topic"], int(found["partition"])) != (topic, partition):
        return None
    return int(found["offset"])


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """One group's round: what to commit, and what is left alone and why."""

    commit: tuple[TranslatedOffset, ...] = ()
    ahead: tuple[TranslatedOffset, ...] = ()  # the target offset is further: kept
    waiting: tuple[TranslatedOffset, ...] = ()  # not replicated up to the group's offset yet


def moves_back_allowed(row: TranslatedOffset, metadata: str | None) -> bool:
    """Whether ``row`` may move the group's target offset back: only when the group went
    back on the source, below the source offset the current target offset came from."""
    came_from = synced_from(metadata, row.topic, row.partition)
    return came_from is not None and row.source_offset is not None and row.source_offset < came_from


def plan_sync(rows: Iterable[TranslatedOffset], metadata: dict[tuple[str, int], str]) -> SyncPlan:
    """Which of one group's translated ``rows`` a sync commits. ``metadata``: the metadata
    of the group's committed offsets on the target, by target topic and partition."""
    commit, ahead, waiting = [], [], []
    for row in rows:
        if row.held_back:  # not replicated yet, or beyond the source's end
            waiting.append(row)
        elif not row.changes or row.target_offset is None:
            continue
        elif row.current is None or row.target_offset > row.current:
            commit.append(row)  # forward
        elif moves_back_allowed(row, metadata.get((row.target_topic, row.partition))):
            commit.append(row)  # back, as the group went back on the source
        else:
            ahead.append(row)
    return SyncPlan(tuple(commit), tuple(ahead), tuple(waiting))
