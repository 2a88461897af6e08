"""Translating a group's committed source offsets to target offsets, over fake logs: the
binary search finds what a scan of the whole log finds, in O(log n) probes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from relay.replication.translation import (
    ProbedCopy,
    TargetPartition,
    TranslatedOffset,
    Translation,
    TranslationStatus,
    changes,
    first_copy_from,
    held_back,
    translate_offset,
)
from relay.replication.types import Route

TRANSLATED, CAUGHT_UP = TranslationStatus.TRANSLATED, TranslationStatus.CAUGHT_UP
NOT_REPLICATED = TranslationStatus.NOT_REPLICATED


@dataclass
class FakeLog:
    """A partition's log: at each offset the source offset of a committed copy, or None
    (a transaction marker, an aborted record, or an offset compaction removed)."""

    entries: list[int | None]
    start: int = 0
    probes: list[int] = field(default_factory=list)

    @property
    def end(self) -> int:
        return len(self.entries)

    def probe(self, m: int) -> ProbedCopy | None:
        self.probes.append(m)
        assert self.start <= m < self.end, f"probe({m}) outside [{self.start}, {self.end})"
        for offset in range(m, self.end):
            if self.entries[offset] is not None:
                return ProbedCopy(offset, self.entries[offset] or 0)
        return None

    def source_probe(self, m: int) -> int | None:
        """The same log read as a source: the first committed offset at m or later."""
        self.probes.append(m)
        return next((o for o in range(m, self.end) if self.entries[o] is not None), None)

    def scan(self, source_offset: int) -> int | None:
        """What a reader of the whole log finds: the oracle."""
        for offset in range(self.start, self.end):
            found = self.entries[offset]
            if found is not None and found >= source_offset:
                return offset
        return None


def source_and_target() -> tuple[FakeLog, FakeLog]:
    """A source with transaction markers, aborted transactions and compaction gaps, and
    its copy (3 records a transaction, some target transactions aborted and retried)."""
    source: list[int | None] = []
    for t in range(40):
        first = len(source)
        source += [first, first + 1, first + 2, None]  # 3 records, then the marker
        if t % 5 == 4:  # aborted: records and marker, none of it committed
            source[first:] = [None, None, None, None]
    for gone in (9, 10, 40, 41, 42, 100):  # compacted away
        source[gone] = None
    committed = [o for o in source if o is not None]
    target: list[int | None] = [None, None]  # an aborted target transaction and its marker
    for i in range(0, len(committed), 4):
        target += committed[i : i + 4]
        target.append(None)  # the target transaction's marker
        if i % 20 == 8:
            target += [None, None, None]  # a batch aborted on the target, then retried
    return FakeLog(source), FakeLog(target)


def test_the_search_finds_what_a_scan_finds_for_every_source_offset() -> None:
    source, target = source_and_target()
    for s in range(source.end + 1):
        found = first_copy_from(s, target.start, target.end, target.probe)
        expected = target.scan(s)
        assert (found.target_offset if found else None) == expected, s
        if found is not None:
            assert found.source_offset >= s
            assert all(e is None or e < s for e in target.entries[:expected])


def test_the_search_costs_a_logarithmic_number_of_probes() -> None:
    target = FakeLog([o if o % 7 else None for o in range(100_000)])
    limit = math.ceil(math.log2(target.end)) + 1
    for s in (0, 1, 6, 7, 8, 49_999, 50_000, 99_998, 99_999, 100_000, 250_000):
        target.probes.clear()
        found = first_copy_from(s, 0, target.end, target.probe)
        assert (found.target_offset if found else None) == target.scan(s)
        assert len(target.probes) <= limit, (s, len(target.probes))


def test_the_search_keeps_to_the_bounds_it_is_given() -> None:
    target = FakeLog([None, 0, 1, None, 2, 3, None], start=3)  # 0..2 deleted by retention
    assert first_copy_from(0, target.start, target.end, target.probe) == ProbedCopy(4, 2)
    assert first_copy_from(3, 3, 5, target.probe) is None  # the copy of 3 is beyond the end
    assert first_copy_from(0, 5, 5, target.probe) is None
    assert all(3 <= m < 7 for m in target.probes)


def translate(
    committed: int,
    target: FakeLog,
    source: FakeLog,
    position: int,
) -> Translation:
    return translate_offset(
        committed,
        TargetPartition(position, target.start, target.end),
        target.probe,
        source_end=source.end,
        source_probe=source.source_probe,
    )


def test_a_group_continues_at_the_copy_of_the_first_record_it_has_not_read() -> None:
    source, target = source_and_target()
    position = max(e for e in source.entries if e is not None) + 1
    # Source offset 5 is a record: its copy. 3 is a marker and 9, 10 were compacted away:
    # the copy of the next committed record. 16..19 were aborted: the copy of 20.
    for s, first_unread in ((5, 5), (3, 4), (9, 12), (16, 20), (0, 0)):
        translation = translate(s, target, source, position)
        assert translation.status is TRANSLATED
        assert translation.target_offset is not None
        assert target.entries[translation.target_offset] == first_unread, s


def test_a_group_at_zero_starts_at_the_first_copy() -> None:
    target = FakeLog([None, None, 0, 1, None], start=1)
    assert translate(0, target, FakeLog([0, 1, None]), 2) == Translation(2, TRANSLATED)


def test_a_group_that_read_everything_copied_is_caught_up_at_the_target_end() -> None:
    source, target = source_and_target()
    position = max(e for e in source.entries if e is not None) + 1
    assert translate(position, target, source, position) == Translation(target.end, CAUGHT_UP)
    # Its committed offset past the last transaction's marker: nothing committed between.
    past_marker = source.end
    assert translate(past_marker, target, source, position) == Translation(target.end, CAUGHT_UP)


def test_a_group_ahead_of_the_replicator_is_not_replicated_yet() -> None:
    source, target = source_and_target()
    # The replicator copied what the target holds, but only up to source offset 47: the
    # marker of the transaction of 44..46.
    copied = FakeLog([e if e is not None and e < 47 else None for e in target.entries])
    assert translate(60, copied, source, 47) == Translation(None, NOT_REPLICATED)
    assert translate(49, copied, source, 47) == Translation(None, NOT_REPLICATED)
    # Its position is behind the group's offset, but only that marker lies between: a
    # group that committed its position past the marker is caught up.
    assert source.entries[46] == 46 and source.entries[47] is None
    assert translate(48, copied, source, 47) == Translation(copied.end, CAUGHT_UP)


def test_an_empty_target() -> None:
    source = FakeLog([0, 1, 2, None])
    # Nothing copied yet, and the group read nothing: it starts with the first copy.
    assert translate(0, FakeLog([]), source, 0) == Translation(0, CAUGHT_UP)
    assert translate(2, FakeLog([]), source, 0) == Translation(None, NOT_REPLICATED)
    # Everything was copied and the target's retention deleted it all.
    deleted = FakeLog([None] * 5, start=5)
    assert translate(4, deleted, source, 3) == Translation(5, CAUGHT_UP)


def test_an_offset_beyond_the_source_end_is_not_translated() -> None:
    source, target = FakeLog([0, 1, None]), FakeLog([0, 1, None])
    assert translate(7, target, source, 2) == Translation(None, TranslationStatus.BEYOND_SOURCE)
    assert target.probes == [] and source.probes == []


@pytest.mark.parametrize(
    ("status", "target_offset", "current", "changed", "held"),
    [
        (TRANSLATED, 5, None, True, False),
        (TRANSLATED, 5, 5, False, False),
        (CAUGHT_UP, 9, 4, True, False),
        (NOT_REPLICATED, None, 3, False, True),
        (TranslationStatus.BEYOND_SOURCE, None, None, False, True),
    ],
)
def test_which_rows_change_the_group_and_which_are_held_back(
    status: TranslationStatus,
    target_offset: int | None,
    current: int | None,
    changed: bool,
    held: bool,
) -> None:
    row = TranslatedOffset("t", 0, 7, "dr.t", target_offset, status, current)
    assert (changes([row]) == [row], held_back([row]) == [row]) == (changed, held)


def test_a_partition_without_an_offset_is_neither_changed_nor_held_back() -> None:
    row = TranslatedOffset("t", 1, None, "dr.t", None, TranslationStatus.NO_OFFSET)
    assert changes([row]) == [] and held_back([row]) == []


def test_a_translation_becomes_a_row_of_its_route() -> None:
    row = Translation(5, TRANSLATED).row(Route("t", 1, "dr.t"), 7, 3)
    assert row == TranslatedOffset("t", 1, 7, "dr.t", 5, TRANSLATED, 3)
