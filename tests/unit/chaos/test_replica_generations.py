"""The replica checker for a source topic deleted and created again during the run
(relay.chaos.replica_checker.compare_generations): the old topic's copies must stay, the
new topic's records must all be copied once after them, from its first offset."""

from __future__ import annotations

from dataclasses import replace

from relay.chaos.ingest import ingest_value
from relay.chaos.replica_checker import compare_generations, generation
from relay.chaos.topic_records import TopicRecord
from tests.unit.chaos.test_replica_checker import copy_of

TOPIC = "chaos-ingest"


def life(generation: int, offsets: range, first_n: int = 0) -> list[TopicRecord]:
    """A generation's records in partition 0 (source offsets start at 0 in each life)."""
    return [
        TopicRecord(0, o, b"k", ingest_value(generation, first_n + i), (), 1_700_000_000_000 + o)
        for i, o in enumerate(offsets)
    ]


def copies(*records: TopicRecord) -> list[TopicRecord]:
    return [copy_of(r, n, topic=TOPIC) for n, r in enumerate(records)]


OLD, NEW = life(0, range(4)), life(1, range(3), first_n=4)


def test_the_old_copies_kept_and_the_new_topic_copied_from_its_first_offset_pass() -> None:
    check = compare_generations([OLD, NEW], copies(*OLD, *NEW), TOPIC, "east")
    assert check.ok, check
    assert (check.source, check.copies) == (7, 7)


def test_the_new_topic_copied_from_the_old_position_loses_its_first_records() -> None:
    # `--restore-positions` on a recreated topic (the wrong way out): the new topic is
    # copied from offset 4, the old topic's position; its offsets 0..2 are never copied.
    newer = life(1, range(6), first_n=4)
    check = compare_generations([OLD, newer], copies(*OLD, *newer[4:]), TOPIC, "east")
    assert (check.lost, check.duplicated) == (4, 0)
    assert check.examples["replica_lost"][0] == "source partition 0 offset 0: no copy"


def test_the_old_topic_copied_again_is_duplicated_and_a_crossing_is_out_of_order() -> None:
    check = compare_generations([OLD, NEW], copies(*OLD, *NEW, *OLD[:2]), TOPIC, "east")
    assert (check.lost, check.duplicated, check.out_of_order) == (0, 2, 2)
    assert "generation 0 after generation 1" in check.examples["replica_out_of_order"][0]


def test_a_copy_of_no_generation_is_extra() -> None:
    stray = replace(OLD[0], value=b"not json")
    found = compare_generations([OLD, NEW], copies(*OLD, *NEW, stray), TOPIC, "east")
    assert (found.extra, found.copies) == (1, 8)
    assert generation(b"not json") is None and generation(OLD[0].value) == 0
