"""Consumer failover: a group's committed source offsets as offsets of the target topics.

A consumer group ``G`` that read source partition ``T[p]`` up to its committed offset
``S`` (the next record it would read) continues on the target at the offset of the first
copy in ``T'[p]`` whose ``relay-source-offset`` is ``S`` or more: the copy of the first
record it has not read. Target offsets differ from source offsets (transaction markers
and aborted records are not copied, a compacted source has gaps), but the copies keep the
source's order, so their source offsets grow with their target offsets and the copy is
found by a binary search over the target partition, ``O(log n)`` fetches
(:func:`first_copy_from`).

When no copy has a source offset of ``S`` or more yet, ``G`` has read everything copied
so far: it continues at the target's end (its last stable offset) if the replicator has
copied every committed source record below ``S``, and the partition is *not replicated
up to S yet* otherwise (reported, never applied). :func:`translate_offset` decides.

The adapter (:mod:`relay.kafka.offset_translation`) reads, for each partition, the
replicator's position **before** the target's end, and searches below that end: a copy
committed after the position was read then lies beyond the end, so "caught up" never
lands a group before copies of records it has already read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from relay.replication.types import Route


class TranslationStatus(StrEnum):
    TRANSLATED = "translated"  # at the copy of the first record G has not read
    CAUGHT_UP = "caught up"  # G read everything: the target's end
    NOT_REPLICATED = "not replicated yet"  # the replicator has not copied up to S
    BEYOND_SOURCE = "beyond the source's end"  # S > the source's last stable offset
    NO_OFFSET = "no offset"  # G committed nothing for this partition: skipped

    @property
    def applicable(self) -> bool:
        return self in (TranslationStatus.TRANSLATED, TranslationStatus.CAUGHT_UP)


@dataclass(frozen=True, slots=True)
class ProbedCopy:
    """A committed record of a target partition: its offset, and the source offset its
    ``relay-source-offset`` header names."""

    target_offset: int
    source_offset: int


CopyProbe = Callable[[int], ProbedCopy | None]
"""``probe(m)``: the first committed record of the target partition at offset ``m`` or
later and below the end the search was given; None when there is none."""

SourceProbe = Callable[[int], int | None]
"""``probe(m)``: the offset of the first committed record of the source partition at
offset ``m`` or later and below its last stable offset; None when there is none."""


@dataclass(frozen=True, slots=True)
class TargetPartition:
    """What the translation of one partition needs to know of the target, read in this
    order: the replicator's position, then the partition's first and last stable offset."""

    position: int  # the replicator's next source offset to copy (0: nothing copied)
    start: int  # the target partition's first offset
    end: int  # its last stable offset


@dataclass(frozen=True, slots=True)
class Translation:
    target_offset: int | None  # None: not applicable (see the status)
    status: TranslationStatus

    def row(self, route: Route, source_offset: int | None, current: int | None) -> TranslatedOffset:
        """This translation of ``route``'s committed ``source_offset`` as a table row;
        ``current``: the group's committed offset of the target partition now."""
        return TranslatedOffset(
            route.topic,
            route.partition,
            source_offset,
            route.target_topic,
            self.target_offset,
            self.status,
            current,
        )


def first_copy_from(
    source_offset: int, start: int, end: int, probe: CopyProbe
) -> ProbedCopy | None:
    """The first committed copy in target offsets ``[start, end)`` whose source offset is
    ``source_offset`` or more; None when there is none.

    Searches the smallest ``m`` for which ``probe(m)`` is None or a copy of such a record
    (true from there on, since source offsets grow with target offsets); ``probe(m)`` at
    that ``m`` is the copy. A copy of an older record moves the lower bound past it, so
    aborted ranges and gaps cost no extra probes."""
    lo, hi = start, end
    found: ProbedCopy | None = None
    while lo < hi:
        mid = (lo + hi) // 2
        copy = probe(mid)
        if copy is None or copy.source_offset >= source_offset:
            hi, found = mid, copy
        else:
            lo = max(mid, copy.target_offset) + 1
    return found


def translate_offset(
    committed: int,
    target: TargetPartition,
    probe: CopyProbe,
    *,
    source_end: int,
    source_probe: SourceProbe,
) -> Translation:
    """Where a group that committed source offset ``committed`` continues on the target.

    Caught up when the replicator's position is ``committed`` or more, or when no
    committed source record lies between the position and ``committed`` (only
    transaction markers or aborted records: a group that commits its position past a
    transaction's marker is caught up with a replicator whose position is the offset
    after the transaction's last record)."""
    if committed > source_end:
        return Translation(None, TranslationStatus.BEYOND_SOURCE)
    copy = first_copy_from(committed, target.start, target.end, probe)
    if copy is not None:
        return Translation(copy.target_offset, TranslationStatus.TRANSLATED)
    if target.position >= committed or _only_uncommitted(target.position, committed, source_probe):
        return Translation(target.end, TranslationStatus.CAUGHT_UP)
    return Translation(None, TranslationStatus.NOT_REPLICATED)


def _only_uncommitted(position: int, committed: int, source_probe: SourceProbe) -> bool:
    """No committed source record in ``[position, committed)``."""
    first = source_probe(position)
    return first is None or first >= committed


@dataclass(frozen=True, slots=True)
class TranslatedOffset:
    """One source partition of the group, translated: a row of the command's table."""

    topic: str
    partition: int
    source_offset: int | None  # the group's committed offset on the source (None: none)
    target_topic: str
    target_offset: int | None  # where it continues on the target (None: not applicable)
    status: TranslationStatus
    current: int | None = None  # the group's committed offset of the target partition now

    @property
    def changes(self) -> bool:
        """Applying it would change the group's committed offset on the target."""
        return self.status.applicable and self.target_offset != self.current

    @property
    def held_back(self) -> bool:
        """The group has an offset here that cannot be applied (yet)."""
        return self.source_offset is not None and not self.status.applicable


def changes(rows: Iterable[TranslatedOffset]) -> list[TranslatedOffset]:
    """The rows that applying would change."""
    return [row for row in rows if row.changes]


def held_back(rows: Iterable[TranslatedOffset]) -> list[TranslatedOffset]:
    """The rows with an offset that is not applied: not replicated up to it yet, or
    beyond the source's end."""
    return [row for row in rows if row.held_back]
