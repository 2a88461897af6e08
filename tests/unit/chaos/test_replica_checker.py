"""The replica checker's comparison, fed with hand-made source and target records: it must
find each kind of anomaly, count it once, and pass a faithful copy."""

from __future__ import annotations

from dataclasses import replace

from relay.chaos.checker import CheckResult
from relay.chaos.replica_checker import PROVENANCE, compare_replica, provenance
from relay.chaos.topic_records import TopicRecord

TOPIC = "chaos-accounts"


def original(partition: int, offset: int) -> TopicRecord:
    return TopicRecord(
        partition,
        offset,
        b"k%d" % offset,
        b"v%d-%d" % (partition, offset),
        (("event_type", b"AccountChanged"), ("trace", b"t%d" % offset)),
        1_700_000_000_000 + offset,
    )


def copy_of(
    record: TopicRecord, target_offset: int, *, cluster: bytes = b"east", topic: str = TOPIC
) -> TopicRecord:
    provenance_headers = tuple(
        zip(
            PROVENANCE,
            (cluster, topic.encode(), b"%d" % record.partition, b"%d" % record.offset),
            strict=True,
        )
    )
    return replace(record, offset=target_offset, headers=record.headers + provenance_headers)


def clean() -> tuple[list[TopicRecord], list[TopicRecord]]:
    # offsets with gaps: transaction markers and aborted records are not copied
    source = [original(0, o) for o in (0, 1, 3, 4, 7)] + [original(1, o) for o in (2, 5)]
    copies = [copy_of(r, n) for n, r in enumerate(source[:5])]
    copies += [copy_of(r, n) for n, r in enumerate(source[5:])]
    return source, copies


def test_a_faithful_copy_passes() -> None:
    source, copies = clean()
    check = compare_replica(list(reversed(source)), list(reversed(copies)), TOPIC, "east")
    assert check.ok
    assert (check.source, check.copies) == (7, 7)
    assert check.anomalies == {
        "replica_lost": 0,
        "replica_duplicated": 0,
        "replica_out_of_order": 0,
        "replica_extra": 0,
        "replica_corrupted": 0,
    }


def test_a_missing_copy_is_lost() -> None:
    source, copies = clean()
    check = compare_replica(source, copies[:2] + copies[3:], TOPIC)
    assert (check.lost, check.ok) == (1, False)
    assert check.examples["replica_lost"] == ("source partition 0 offset 3: no copy",)


def test_a_second_copy_is_duplicated_and_counted_once() -> None:
    source, copies = clean()
    again = replace(copies[1], offset=99)  # the same source offset copied again later
    check = compare_replica(source, [*copies, again], TOPIC)
    assert (check.duplicated, check.lost, check.out_of_order, check.extra) == (1, 0, 0, 0)


def test_copies_in_another_order_than_the_source_are_out_of_order() -> None:
    source, copies = clean()
    swapped = [
        replace(copies[2], offset=copies[3].offset),
        replace(copies[3], offset=copies[2].offset),
    ]
    check = compare_replica(source, [*copies[:2], *swapped, *copies[4:]], TOPIC)
    assert (check.out_of_order, check.lost, check.duplicated) == (1, 0, 0)
    assert "source offset 3 after source offset 4" in check.examples["replica_out_of_order"][0]


def test_copies_of_no_committed_record_or_without_provenance_are_extra() -> None:
    source, copies = clean()
    aborted = copy_of(original(0, 2), 50)  # offset 2 is no committed source record
    bare = replace(source[0], offset=51)  # no provenance headers at all
    elsewhere = copy_of(original(1, 2), 52)  # names partition 1, sits in partition 0
    other_topic = copy_of(source[0], 53, topic="other")
    unordered = replace(copies[0], offset=54, headers=copies[0].headers[::-1])
    extras = [aborted, bare, replace(elsewhere, partition=0), other_topic, unordered]
    check = compare_replica(source, copies + extras, TOPIC)
    assert (check.extra, check.duplicated, check.lost) == (5, 0, 0)


def test_a_changed_key_value_header_timestamp_or_cluster_is_corrupted() -> None:
    source, copies = clean()
    changed = [
        replace(copies[0], key=b"other"),
        replace(copies[1], value=b"other"),
        replace(copies[2], headers=(("trace", b"x"), *copies[2].headers[1:])),
        replace(copies[3], timestamp=1),
        copy_of(source[4], copies[4].offset, cluster=b"west"),
    ]
    check = compare_replica(source, changed + copies[5:], TOPIC, "east")
    assert (check.corrupted, check.lost, check.extra) == (5, 0, 0)
    dropped_header = replace(copies[0], headers=copies[0].headers[1:])
    assert compare_replica(source, [dropped_header, *copies[1:]], TOPIC).corrupted == 1


def test_provenance_needs_the_four_headers_last_and_decimal() -> None:
    source, copies = clean()
    assert provenance(copies[2]) is not None
    assert provenance(copies[2]).offset == 3  # type: ignore[union-attr]
    assert provenance(source[0]) is None
    bad = replace(copies[0], headers=(*copies[0].headers[:-1], ("relay-source-offset", b"x")))
    assert provenance(bad) is None


def test_replica_counts_join_the_summary_and_the_verdict() -> None:
    source, copies = clean()
    result = CheckResult(events=7, ledger=7, mirror_mismatch=0)
    assert result.summary_line().endswith("mirror_mismatch=0 OK")
    passed = result.with_replica(compare_replica(source, copies, TOPIC))
    assert passed.summary_line() == (
        "checked 7 events (ledger 7): lost=0 duplicated=0 out_of_order=0 aborted_visible=0 "
        "corrupted=0 mirror_mismatch=0 replica_lost=0 replica_duplicated=0 "
        "replica_out_of_order=0 replica_extra=0 replica_corrupted=0 OK"
    )
    failed = result.with_replica(compare_replica(source, copies[1:], TOPIC))
    assert not failed.ok
    assert failed.anomalies["replica_lost"] == 1
    assert failed.examples["replica_lost"] == ("source partition 0 offset 0: no copy",)
    unmirrored = CheckResult(events=7, ledger=7).with_replica(compare_replica(source, [], TOPIC))
    assert unmirrored.summary_line().endswith(
        "corrupted=0 mirror_mismatch=skipped replica_lost=7 replica_duplicated=0 "
        "replica_out_of_order=0 replica_extra=0 replica_corrupted=0 FAILED"
    )
