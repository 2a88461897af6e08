"""Whether a replicated partition's committed position can be trusted, checked after
fencing at every start (and restart) of the partition.

The position (the committed offset of the target partition for the replicator's group, on
the target cluster) is refused when its stamp names another source, another source cluster
id, another transactional-id prefix (replicators with different prefixes never fence each
other) or another source topic id (the source topic was deleted and created again: its
offsets count from 0 again). A position stamped with another *target* topic id went with
the target topic it counted copies of: the partition is copied again from the start.

The target partition itself holds a floor: the ``relay-source-offset`` of its last
committed copy (at or after the stamp's ``since``). Each copy and the position after it
are committed in one transaction, so a trusted position is exactly that copy's source
offset + 1. A position that is missing while copies exist (the group deleted, or expired
by ``offsets.retention.minutes``), or that differs from the floor (reset, moved back or
forward), is refused: `relay replicate --restore-positions` rebuilds it from the copies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from relay.errors import ReplicaPositionError
from relay.replication.ports import TopicIds
from relay.replication.types import LastCopy, PositionStamp, ReplicaPosition, Route

log = logging.getLogger(__name__)

DOCS = 'docs/replication.md, "When the positions do not fit"'


def recreated_error(route: Route, old_id: str, new_id: str | None, running: bool) -> Exception:
    when = "while it was copied" if running else "since its position was committed"
    return ReplicaPositionError(
        f"{route}: source topic {route.topic} was deleted and created again {when} (topic id "
        f"{old_id} -> {new_id}): its offsets start again at 0, and nothing of the new topic "
        f"was copied ({DOCS}); `relay replicate --reset-recreated-topic {route.topic}` "
        "copies the new topic from its first offset"
    )


def _where(route: Route) -> str:
    return f"{route.target_topic}[{route.partition}]"


def _restore_hint(route: Route) -> str:
    return (
        f"nothing was copied ({DOCS}); `relay replicate --restore-positions` sets "
        f"the position from the copies on {route.target_topic}"
    )


def checked_start(
    route: Route,
    committed: ReplicaPosition,
    mine: PositionStamp,
    last_copy: Callable[[int], LastCopy | None],
    source_end: int,
) -> tuple[int, PositionStamp]:
    """The offset to copy from and the stamp to commit with, or ReplicaPositionError.
    ``mine``: this replicator's stamp (``since`` 0); ``last_copy(since)``: the target
    partition's last copy at or after target offset ``since``."""
    found = committed.stamp
    if found is not None:
        _check_owner(route, found, mine)
        if found.target_id is not None and found.target_id != mine.target_id:
            log.warning(
                "%s: target topic %s was deleted and created again (topic id %s -> %s): "
                "copying this partition again from the source's first offset",
                route,
                route.target_topic,
                found.target_id,
                mine.target_id,
            )
            committed, found = ReplicaPosition(0, None, exists=False), None
        elif found.topic_id is not None and found.topic_id != mine.topic_id:
            raise recreated_error(route, found.topic_id, mine.topic_id, running=False)
    stamp = mine if found is None else replace(mine, since=found.since, as_of_ms=found.as_of_ms)
    copy = last_copy(stamp.since)
    if copy is not None and (copy.cluster, copy.topic) != (mine.origin.cluster, route.topic):
        raise ReplicaPositionError(
            f"{route}: target topic {route.target_topic} holds copies of source "
            f"{copy.cluster!r} topic {copy.topic!r}, this replicator copies "
            f"{mine.origin.cluster!r} topic {route.topic!r}; give each source its own target "
            "topics (--target-prefix)"
        )
    if copy is not None and not committed.exists:
        raise ReplicaPositionError(
            f"{route}: group has no position for {_where(route)}, but it holds copies up to "
            f"source offset {copy.source_offset}: the group's offsets were deleted or expired "
            f"(offsets.retention.minutes), and copying again would duplicate them; "
            + _restore_hint(route)
        )
    if copy is not None and committed.next_offset != copy.floor:
        moved = "back" if committed.next_offset < copy.floor else "forward"
        raise ReplicaPositionError(
            f"{route}: the position of {_where(route)} is {committed.next_offset}, but its "
            f"last copy is of source offset {copy.source_offset} (next: {copy.floor}): the "
            f"group's offset was moved {moved} (kafka-consumer-groups --reset-offsets?), "
            "which would copy records twice or skip them; " + _restore_hint(route)
        )
    if committed.next_offset > source_end:
        raise ReplicaPositionError(
            f"{route}: the target holds position {committed.next_offset}, beyond "
            f"the source partition's end ({source_end}): the source topic was deleted and "
            "created again, or this is another cluster; nothing was copied "
            f"({DOCS}); `relay replicate --reset-recreated-topic {route.topic}` copies it "
            "from its first offset"
        )
    return committed.next_offset, stamp


def checked_start_read_again(
    route: Route,
    committed: ReplicaPosition,
    mine: PositionStamp,
    last_copy: Callable[[int], LastCopy | None],
    source_end: int,
    *,
    read_again: Callable[[], ReplicaPosition],
) -> tuple[int, PositionStamp]:
    """:func:`checked_start`; when it refuses after reading the target's last copy, once
    more with the position read again (``read_again``) and the same last copy.

    The position is read first (when fencing) and the last copy after: a process paused
    between the two (or whose position read was answered before another instance copied
    on) sees copies beyond its position, as if the group's offset had been moved back.
    Read after the last copy, a position that was not moved is at least that copy."""
    copies: dict[int, LastCopy | None] = {}

    def remembered(since: int) -> LastCopy | None:
        if since not in copies:
            copies[since] = last_copy(since)
        return copies[since]

    try:
        return checked_start(route, committed, mine, remembered, source_end)
    except ReplicaPositionError:
        if not copies:
            raise  # refused on the position alone: reading it again changes nothing
        return checked_start(route, read_again(), mine, remembered, source_end)


def _check_owner(route: Route, found: PositionStamp, mine: PositionStamp) -> None:
    if found.origin != mine.origin:
        raise ReplicaPositionError(
            f"{route}: the position of {_where(route)} on the target was committed for source "
            f"{found.origin.cluster!r} topic {found.origin.topic!r}, this one "
            f"copies {mine.origin.cluster!r} topic {mine.origin.topic!r}; give each "
            "source its own target topics (--target-prefix) or its own --group"
        )
    if found.cluster_id is not None and found.cluster_id != mine.cluster_id:
        raise ReplicaPositionError(
            f"{route}: the position of {_where(route)} was committed for source cluster id "
            f"{found.cluster_id}, this source cluster is {mine.cluster_id} (same alias "
            f"{mine.origin.cluster!r}); give each source cluster its own --group"
        )
    if found.prefix is not None and found.prefix != mine.prefix:
        raise ReplicaPositionError(
            f"{route}: the group is used by replicators with transactional-id prefix "
            f"{found.prefix!r}, this one has {mine.prefix!r}; replicators with different "
            "prefixes do not fence each other, so they must not share a group (stop the "
            "others and use their prefix, or give this one its own --group)"
        )


def same_topics(route: Route, stamp: PositionStamp, ids: TopicIds, since: float) -> bool:
    """Whether the source and target topics are still those of the position, as described
    at or after ``since`` (when the batch's records were read): a source topic created
    again is refused (its records are not those the position counts); False when the
    target topic was created again (fence and read the position again)."""
    source = ids.source(route.topic, since)
    if stamp.topic_id is not None and source != stamp.topic_id:
        raise recreated_error(route, stamp.topic_id, source, running=True)
    target = ids.target(route.target_topic, since)
    if stamp.target_id is None or target == stamp.target_id:
        return True
    log.warning(
        "%s: target topic %s was deleted and created again while it was copied (topic id "
        "%s -> %s); fencing and reading the position again",
        route,
        route.target_topic,
        stamp.target_id,
        target,
    )
    return False


def check_owner(route: Route, committed: ReplicaPosition, mine: PositionStamp) -> None:
    """Before each batch: refuse a position committed meanwhile by a replicator of another
    source or prefix (instances with different prefixes do not fence each other; two
    started at the same moment on a partition that had no position both copy it). One of
    the same prefix is left to fence this one at its commit (exit 5)."""
    if committed.exists and committed.stamp is not None:
        _check_owner(route, committed.stamp, mine)
