"""The independent checker's comparison logic: pure functions over plain values.

It trusts none of the relay's bookkeeping (no outbox rows, positions or stored offsets).
The truth is what the workload committed in PostgreSQL: the ledger (one row per event,
written in the same transaction as the event) and the account rows. The evidence is what
a ``read_committed`` consumer sees in the topic, from the beginning, and the mirrored
table. Every count is a number of Kafka records (or of mirrored rows):

* ``lost``: ledger events that are not in the topic;
* ``duplicated``: records whose event id was already seen earlier in the topic;
* ``out_of_order``: first occurrences whose version is not above every version of the
  same key before it (per key, in offset order; versions grow in commit order);
* ``aborted_visible``: records whose event id is not in the ledger (a rolled-back or
  never-committed transaction became visible), or that cannot be decoded at all;
* ``corrupted``: records of a ledger event whose key, version or balance differ from it;
* ``mirror_mismatch``: keys whose mirrored row is missing, extra or different;
* ``history_mismatch``: keys whose rows in the history-mode (scd2) table are not the
  sequence of versions the source committed: every version once, in commit order, each
  valid until the next one's start, only the last one current.

When the run replicates the topic to a second cluster, the replica's counts
(:mod:`relay.chaos.replica_checker`) join these as ``replica_<kind>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.chaos.replica_checker import ReplicaCheck

from relay.chaos.topic_records import EXAMPLES, TopicRecord


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One event the workload committed (a row of ``chaos_ledger``)."""

    event_id: str
    key: str
    version: int
    balance: int


@dataclass(frozen=True, slots=True)
class AccountRow:
    key: str
    version: int
    balance: int


_AFTER_MIRROR = ("history_", "replica_")  # the counts the summary shows after the mirror's


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One version of an account in the history-mode (scd2) mirror table."""

    key: str
    seq: int  # the table's version column: the record's outbox seq
    version: int
    balance: int
    valid_from: datetime
    valid_to: datetime | None
    is_current: bool


@dataclass(frozen=True, slots=True)
class CheckResult:
    events: int
    ledger: int
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    aborted_visible: int = 0
    corrupted: int = 0
    mirror_mismatch: int | None = None  # None: the mirror was not checked
    mirror_rows: int = 0
    history_mismatch: int | None = None  # None: the history table was not checked
    history_rows: int = 0
    replica: ReplicaCheck | None = None  # None: no replica was checked
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def anomalies(self) -> dict[str, int]:
        counts = {
            "lost": self.lost,
            "duplicated": self.duplicated,
            "out_of_order": self.out_of_order,
            "aborted_visible": self.aborted_visible,
            "corrupted": self.corrupted,
        }
        if self.mirror_mismatch is not None:
            counts["mirror_mismatch"] = self.mirror_mismatch
        if self.history_mismatch is not None:
            counts["history_mismatch"] = self.history_mismatch
        if self.replica is not None:
            counts.update(self.replica.anomalies)
        return counts

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def summary_line(self) -> str:
        shown: dict[str, object] = {**self.anomalies}
        if self.mirror_mismatch is None:  # after the topic's counts, before the replica's
            events = {k: shown.pop(k) for k in list(shown) if not k.startswith(_AFTER_MIRROR)}
            shown = {**events, "mirror_mismatch": "skipped", **shown}
        counts = " ".join(f"{name}={value}" for name, value in shown.items())
        verdict = "OK" if self.ok else "FAILED"
        return f"checked {self.events} events (ledger {self.ledger}): {counts} {verdict}"

    def with_mirror(self, mismatch: int, rows: int, examples: tuple[str, ...]) -> CheckResult:
        merged = dict(self.examples)
        if examples:
            merged["mirror_mismatch"] = examples
        return replace(self, mirror_mismatch=mismatch, mirror_rows=rows, examples=merged)

    def with_history(self, mismatch: int, rows: int, examples: tuple[str, ...]) -> CheckResult:
        merged = dict(self.examples)
        if examples:
            merged["history_mismatch"] = examples
        return replace(self, history_mismatch=mismatch, history_rows=rows, examples=merged)

    def with_replica(self, replica: ReplicaCheck) -> CheckResult:
        return replace(self, replica=replica, examples={**self.examples, **replica.examples})


@dataclass(frozen=True, slots=True)
class DecodedEvent:
    event_id: str
    key: str
    version: int
    balance: int


def decode_event(value: bytes | None) -> DecodedEvent | None:
    """The event a record carries, or None when it is not one of the workload's events."""
    if value is None:
        return None
    try:
        data = json.loads(value)
        event = DecodedEvent(
            str(data["event_id"]), str(data["key"]), int(data["version"]), int(data["balance"])
        )
    except (ValueError, TypeError, KeyError):
        return None
    return event


class _Examples:
    def __init__(self) -> None:
        self.found: dict[str, list[str]] = {}

    def add(self, kind: str, text: str) -> None:
        bucket = self.found.setdefault(kind, [])
        if len(bucket) < EXAMPLES:
            bucket.append(text)

    def frozen(self) -> dict[str, tuple[str, ...]]:
        return {kind: tuple(texts) for kind, texts in self.found.items()}


def compare_events(ledger: Iterable[LedgerEntry], records: Iterable[TopicRecord]) -> CheckResult:
    """Compare the committed events with what the topic holds (see the module doc)."""
    truth = {entry.event_id: entry for entry in ledger}
    ordered = sorted(records, key=lambda r: (r.partition, r.offset))
    examples = _Examples()
    seen: set[str] = set()
    highest: dict[str, tuple[int, TopicRecord]] = {}
    duplicated = out_of_order = aborted = corrupted = 0
    for record in ordered:
        where = f"partition {record.partition} offset {record.offset}"
        event = decode_event(record.value)
        if event is None or event.event_id not in truth:
            aborted += 1
            examples.add("aborted_visible", f"{where}: {event or record.value!r}")
            continue
        if event.event_id in seen:
            duplicated += 1
            examples.add("duplicated", f"{where}: event {event.event_id}")
            continue
        seen.add(event.event_id)
        expected = truth[event.event_id]
        record_key = record.key.decode(errors="replace") if record.key is not None else None
        if (event.key, event.version, event.balance) != (
            expected.key,
            expected.version,
            expected.balance,
        ) or record_key != expected.key:
            corrupted += 1
            examples.add("corrupted", f"{where}: {event} (ledger: {expected})")
        previous = highest.get(expected.key)
        if previous is not None and expected.version <= previous[0]:
            out_of_order += 1
            before = previous[1]
            examples.add(
                "out_of_order",
                f"{where}: key {expected.key} version {expected.version} after version "
                f"{previous[0]} at partition {before.partition} offset {before.offset}",
            )
        else:
            highest[expected.key] = (expected.version, record)
    missing = sorted(set(truth) - seen, key=lambda i: (truth[i].key, truth[i].version))
    for event_id in missing:
        entry = truth[event_id]
        examples.add("lost", f"event {event_id} key {entry.key} version {entry.version}")
    return CheckResult(
        events=len(ordered),
        ledger=len(truth),
        lost=len(missing),
        duplicated=duplicated,
        out_of_order=out_of_order,
        aborted_visible=aborted,
        corrupted=corrupted,
        examples=examples.frozen(),
    )


def compare_mirror(
    source: Mapping[str, AccountRow], mirror: Mapping[str, AccountRow]
) -> tuple[int, tuple[str, ...]]:
    """How many keys differ between the source table and its mirror, with examples.

    A source row that no event ever changed (version 0) has nothing to mirror."""
    examples = _Examples()
    mismatched = 0
    for key in sorted(set(source) | set(mirror)):
        want, got = source.get(key), mirror.get(key)
        if want is not None and want.version == 0 and got is None:
            continue
        if want != got:
            mismatched += 1
            examples.add("mirror", f"key {key}: source {want}, mirror {got}")
    return mismatched, tuple(examples.found.get("mirror", ()))


def compare_history(
    ledger: Iterable[LedgerEntry], rows: Iterable[HistoryRow]
) -> tuple[int, tuple[str, ...]]:
    """How many keys' versions in the history table differ from the sequence of versions
    the source committed (the ledger, in version order), with examples."""
    committed: dict[str, list[tuple[int, int]]] = {}
    for entry in sorted(ledger, key=lambda e: (e.key, e.version)):
        committed.setdefault(entry.key, []).append((entry.version, entry.balance))
    kept: dict[str, list[HistoryRow]] = {}
    for row in sorted(rows, key=lambda r: (r.key, r.seq)):
        kept.setdefault(row.key, []).append(row)
    examples = _Examples()
    mismatched = 0
    for key in sorted(set(committed) | set(kept)):
        problem = _history_problem(committed.get(key, []), kept.get(key, []))
        if problem is not None:
            mismatched += 1
            examples.add("history", f"key {key}: {problem}")
    return mismatched, tuple(examples.found.get("history", ()))


def _history_problem(want: Sequence[tuple[int, int]], got: Sequence[HistoryRow]) -> str | None:
    versions = [(r.version, r.balance) for r in got]
    if versions != list(want):
        first = next(
            (i for i, (w, g) in enumerate(zip(want, versions, strict=False)) if w != g),
            min(len(want), len(versions)),
        )
        shown = "none" if first >= len(versions) else f"(version, balance) {versions[first]}"
        needed = "none" if first >= len(want) else str(want[first])
        return (
            f"{len(versions)} versions kept, {len(want)} committed; "
            f"at #{first + 1}: kept {shown}, committed {needed}"
        )
    for before, after in pairwise(got):
        if before.is_current or before.valid_to != after.valid_from:
            return (
                f"version {before.version} is_current={before.is_current}, valid_to "
                f"{before.valid_to}, next version valid from {after.valid_from}"
            )
    if got and (not got[-1].is_current or got[-1].valid_to is not None):
        return f"last version {got[-1].version} is not current (valid_to {got[-1].valid_to})"
    return None
