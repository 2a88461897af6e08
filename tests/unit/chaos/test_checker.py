"""The independent checker's comparison logic, fed with hand-made evidence: it must find
each kind of anomaly, count it once, and pass clean evidence."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from relay.chaos.checker import (
    AccountRow,
    HistoryRow,
    LedgerEntry,
    compare_events,
    compare_history,
    compare_mirror,
    decode_event,
)
from relay.chaos.topic_records import TopicRecord


def record(e: LedgerEntry, offset: int, partition: int = 0, **changes: object) -> TopicRecord:
    value = {"event_id": e.event_id, "key": e.key, "version": e.version, "balance": e.balance}
    value.update(changes)
    key = str(value["key"]).encode()
    return TopicRecord(partition, offset, key, json.dumps(value).encode())


def clean() -> tuple[list[LedgerEntry], list[TopicRecord]]:
    ledger = [
        LedgerEntry("id-1", "a", 1, 10),
        LedgerEntry("id-2", "a", 2, 7),
        LedgerEntry("id-b1", "b", 1, 5),
        LedgerEntry("id-3", "a", 3, 12),
    ]
    records = [record(ledger[0], 0), record(ledger[1], 1), record(ledger[3], 2)]
    records.append(record(ledger[2], 0, partition=1))
    return ledger, records


def test_clean_evidence_passes_with_one_summary_line() -> None:
    ledger, records = clean()
    result = compare_events(ledger, list(reversed(records)))  # input order does not matter
    assert result.ok
    assert result.events == 4 and result.ledger == 4
    assert result.summary_line() == (
        "checked 4 events (ledger 4): lost=0 duplicated=0 out_of_order=0 aborted_visible=0 "
        "corrupted=0 mirror_mismatch=skipped OK"
    )


def test_a_committed_event_missing_from_the_topic_is_lost() -> None:
    ledger, records = clean()
    result = compare_events(ledger, records[1:])
    assert (result.lost, result.duplicated, result.out_of_order) == (1, 0, 0)
    assert not result.ok
    assert result.examples["lost"] == ("event id-1 key a version 1",)
    assert "lost=1" in result.summary_line() and result.summary_line().endswith("FAILED")


def test_an_event_seen_twice_is_duplicated_once_and_nothing_else() -> None:
    ledger, records = clean()
    again = record(ledger[0], 3)  # a replay of version 1 after version 3
    result = compare_events(ledger, [*records, again])
    assert result.anomalies == {
        "lost": 0,
        "duplicated": 1,
        "out_of_order": 0,
        "aborted_visible": 0,
        "corrupted": 0,
    }


def test_versions_of_one_key_going_backwards_are_out_of_order() -> None:
    ledger, _ = clean()
    a1, a2, b1, a3 = ledger
    records = [record(a2, 0), record(a1, 1), record(a3, 2), record(b1, 0, partition=1)]
    result = compare_events(ledger, records)
    assert (result.out_of_order, result.lost, result.duplicated) == (1, 0, 0)
    assert "key a version 1 after version 2" in result.examples["out_of_order"][0]


def test_order_is_per_key_not_across_keys() -> None:
    a, b = LedgerEntry("x", "a", 5, 0), LedgerEntry("y", "b", 1, 0)
    assert compare_events([a, b], [record(a, 0), record(b, 1)]).ok


def test_an_event_that_was_never_committed_is_aborted_but_visible() -> None:
    ledger, records = clean()
    rolled_back = LedgerEntry("id-rolled-back", "a", 4, 0)
    garbage = TopicRecord(0, 9, b"a", b"not json")
    tombstone = TopicRecord(0, 10, b"a", None)
    result = compare_events(ledger, [*records, record(rolled_back, 8), garbage, tombstone])
    assert (result.aborted_visible, result.lost, result.duplicated) == (3, 0, 0)


def test_an_event_whose_content_differs_from_the_ledger_is_corrupted() -> None:
    ledger, records = clean()
    records[0] = record(ledger[0], 0, balance=999)
    wrong_key = TopicRecord(1, 0, b"z", records[3].value)
    result = compare_events(ledger, [*records[:3], wrong_key])
    assert (result.corrupted, result.lost, result.aborted_visible) == (2, 0, 0)


def test_decode_event_rejects_values_that_are_not_workload_events() -> None:
    assert decode_event(b'{"event_id": "e", "key": "k", "version": 1, "balance": -3}') is not None
    for bad in (None, b"", b"[]", b'{"event_id": "e"}', b'{"event_id":"e","key":"k",'):
        assert decode_event(bad) is None


def test_mirror_rows_that_differ_are_counted_per_key() -> None:
    source = {
        "a": AccountRow("a", 3, 10),
        "b": AccountRow("b", 1, -4),
        "c": AccountRow("c", 2, 0),
        "untouched": AccountRow("untouched", 0, 0),  # no event: nothing to mirror
    }
    assert compare_mirror(source, {k: v for k, v in source.items() if k != "untouched"}) == (
        0,
        (),
    )
    mirror = {
        "a": AccountRow("a", 2, 7),  # an older version won
        "b": AccountRow("b", 1, -4),
        # "c" missing
        "zombie": AccountRow("zombie", 1, 1),  # never in the source
    }
    mismatched, examples = compare_mirror(source, mirror)
    assert mismatched == 3
    assert examples[0].startswith("key a: source AccountRow(key='a', version=3")


def test_the_mirror_count_joins_the_verdict() -> None:
    ledger, records = clean()
    result = compare_events(ledger, records).with_mirror(2, 10, ("key a: ...",))
    assert not result.ok
    assert "mirror_mismatch=2 FAILED" in result.summary_line()
    assert result.examples["mirror_mismatch"] == ("key a: ...",)
    assert compare_events(ledger, records).with_mirror(0, 10, ()).ok


T = datetime(2026, 1, 1, tzinfo=UTC)


def versions(key: str, *balances: int, closed: bool = False) -> list[HistoryRow]:
    """The history rows of ``balances`` committed as versions 1, 2, ... of ``key``."""
    rows = []
    for n, balance in enumerate(balances, start=1):
        last = n == len(balances)
        until = None if last and not closed else T + timedelta(seconds=n + 1)
        rows.append(
            HistoryRow(
                key, 100 + n, n, balance, T + timedelta(seconds=n), until, last and not closed
            )
        )
    return rows


def test_history_rows_must_be_every_committed_version_in_order() -> None:
    ledger = [LedgerEntry(f"a{n}", "a", n, b) for n, b in enumerate((10, 7, 12), start=1)]
    ledger.append(LedgerEntry("b1", "b", 1, 5))
    good = versions("a", 10, 7, 12) + versions("b", 5)
    assert compare_history(ledger, reversed(good)) == (0, ())
    only_last = [good[2], good[3]]  # a current-state mirror would pass; this must not
    mismatched, examples = compare_history(ledger, only_last)
    assert mismatched == 1
    assert examples == (
        "key a: 1 versions kept, 3 committed; at #1: kept (version, balance) (3, 12), "
        "committed (1, 10)",
    )
    twice = [*good, replace(good[1], seq=150)]  # a version applied twice
    assert compare_history(ledger, twice)[0] == 1


def test_history_rows_must_chain_and_end_current() -> None:
    ledger = [LedgerEntry(f"a{n}", "a", n, b) for n, b in enumerate((10, 7), start=1)]
    rows = versions("a", 10, 7)
    both_current = [replace(rows[0], is_current=True, valid_to=None), rows[1]]
    assert compare_history(ledger, both_current)[0] == 1
    gap = [replace(rows[0], valid_to=T), rows[1]]
    assert compare_history(ledger, gap)[0] == 1
    assert compare_history(ledger, versions("a", 10, 7, closed=True))[0] == 1
    result = compare_events(ledger, []).with_history(1, 2, ("key a: ...",))
    assert "mirror_mismatch=skipped history_mismatch=1 FAILED" in result.summary_line()
