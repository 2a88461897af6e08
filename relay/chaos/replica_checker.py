"""The independent checker of the replica: the target topic against the source topic.

Pure functions over plain values, like :mod:`relay.chaos.checker`. The truth is the
source topic as a ``read_committed`` consumer sees it from the beginning; the evidence is
the target topic read the same way from the target cluster. Each copy is tied to its
original by the provenance headers the replicator promises (docs/replication.md): after
the record's own headers, in this order, ``relay-source-cluster``, ``relay-source-topic``,
``relay-source-partition`` and ``relay-source-offset``. The header names are spelled out
here rather than imported, so that the checker does not share the replicator's code.

Per partition (the copy of source partition ``p`` must be in target partition ``p``),
every count is a number of records:

* ``lost``: committed source records without a copy;
* ``duplicated``: copies of a source record that was copied earlier in the partition;
* ``out_of_order``: first copies whose source offset is not above every source offset
  copied before them in the partition;
* ``extra``: copies of no committed source record (an aborted source record, an offset
  the source never had), or without the four provenance headers, or naming another topic
  or partition;
* ``corrupted``: copies whose key, value, own headers (in order), timestamp or source
  cluster differ from the original.

A source topic deleted and created again (the chaos run's ingest topic) counts its
offsets from 0 again: :func:`compare_generations` takes the records of each of its lives
(*generations*), tells the copies apart by the generation their value names
(``{"generation": g, ...}``), compares each generation as above, and counts as
``out_of_order`` a copy that follows a copy of a later generation in its partition (the
old topic's copies stay where they are, the new topic's follow them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from relay.chaos.topic_records import EXAMPLES, TopicRecord

PROVENANCE = (
    "relay-source-cluster",
    "relay-source-topic",
    "relay-source-partition",
    "relay-source-offset",
)
KINDS = ("lost", "duplicated", "out_of_order", "extra", "corrupted")


@dataclass(frozen=True, slots=True)
class ReplicaCheck:
    """The replica's figures: ``source`` committed source records, ``copies`` records in
    the target topic, and the anomalies (see the module doc)."""

    source: int
    copies: int
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    extra: int = 0
    corrupted: int = 0
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def anomalies(self) -> dict[str, int]:
        """The counts, each named ``replica_<kind>``."""
        return {f"replica_{kind}": getattr(self, kind) for kind in KINDS}

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())


@dataclass(frozen=True, slots=True)
class Provenance:
    cluster: str
    topic: str
    partition: int
    offset: int


def provenance(record: TopicRecord) -> Provenance | None:
    """The provenance a copy carries in its last four headers, or None when they are not
    the four provenance headers, in order, with decimal partition and offset."""
    tail = record.headers[-len(PROVENANCE) :]
    if tuple(name for name, _ in tail) != PROVENANCE or any(v is None for _, v in tail):
        return None
    cluster, topic, partition, offset = (bytes(v or b"").decode(errors="replace") for _, v in tail)
    if not (partition.isdecimal() and offset.isdecimal()):
        return None
    return Provenance(cluster, topic, int(partition), int(offset))


def _original(record: TopicRecord) -> tuple[object, ...]:
    return (record.key, record.value, record.headers, record.timestamp)


def _copied(copy: TopicRecord) -> tuple[object, ...]:
    return (copy.key, copy.value, copy.headers[: -len(PROVENANCE)], copy.timestamp)


class _Examples:
    def __init__(self) -> None:
        self.found: dict[str, list[str]] = {}

    def add(self, kind: str, text: str) -> None:
        bucket = self.found.setdefault(f"replica_{kind}", [])
        if len(bucket) < EXAMPLES:
            bucket.append(text)


def compare_replica(
    source: Iterable[TopicRecord],
    target: Iterable[TopicRecord],
    source_topic: str,
    source_cluster: str | None = None,
) -> ReplicaCheck:
    """Compare the target topic's records with the source topic's (see the module doc);
    ``source_cluster``: the alias every copy must name (None: any non-empty one)."""
    originals: dict[int, dict[int, TopicRecord]] = {}
    for record in source:
        originals.setdefault(record.partition, {})[record.offset] = record
    copies = sorted(target, key=lambda r: (r.partition, r.offset))
    examples = _Examples()
    counts = dict.fromkeys(KINDS, 0)
    seen: dict[int, set[int]] = {}
    highest: dict[int, int] = {}
    for copy in copies:
        where = f"target partition {copy.partition} offset {copy.offset}"
        found = provenance(copy)
        if found is None or (found.topic, found.partition) != (source_topic, copy.partition):
            counts["extra"] += 1
            examples.add("extra", f"{where}: provenance {found}, headers {list(copy.headers)}")
            continue
        original = originals.get(copy.partition, {}).get(found.offset)
        if original is None:
            counts["extra"] += 1
            examples.add("extra", f"{where}: source offset {found.offset} is no committed record")
            continue
        done = seen.setdefault(copy.partition, set())
        if found.offset in done:
            counts["duplicated"] += 1
            examples.add("duplicated", f"{where}: source offset {found.offset} again")
            continue
        done.add(found.offset)
        wrong_cluster = not found.cluster or found.cluster != (source_cluster or found.cluster)
        if _copied(copy) != _original(original) or wrong_cluster:
            counts["corrupted"] += 1
            examples.add(
                "corrupted",
                f"{where} (source offset {found.offset}, cluster {found.cluster!r}): "
                f"{_copied(copy)} != {_original(original)}",
            )
        before = highest.get(copy.partition)
        if before is not None and found.offset <= before:
            counts["out_of_order"] += 1
            examples.add(
                "out_of_order",
                f"{where}: source offset {found.offset} after source offset {before}",
            )
        else:
            highest[copy.partition] = found.offset
    for partition, records in sorted(originals.items()):
        missing = sorted(set(records) - seen.get(partition, set()))
        counts["lost"] += len(missing)
        for offset in missing[:EXAMPLES]:
            examples.add("lost", f"source partition {partition} offset {offset}: no copy")
    return ReplicaCheck(
        source=sum(len(records) for records in originals.values()),
        copies=len(copies),
        lost=counts["lost"],
        duplicated=counts["duplicated"],
        out_of_order=counts["out_of_order"],
        extra=counts["extra"],
        corrupted=counts["corrupted"],
        examples={kind: tuple(texts) for kind, texts in examples.found.items()},
    )


def combine(*checks: ReplicaCheck) -> ReplicaCheck:
    """The sum of several checks (topics, or generations of one topic)."""
    examples: dict[str, list[str]] = {}
    for check in checks:
        for kind, texts in check.examples.items():
            examples.setdefault(kind, []).extend(texts)
    counts = {kind: sum(getattr(c, kind) for c in checks) for kind in KINDS}
    return ReplicaCheck(
        source=sum(c.source for c in checks),
        copies=sum(c.copies for c in checks),
        examples={kind: tuple(texts[:EXAMPLES]) for kind, texts in examples.items()},
        **counts,
    )


def generation(value: bytes | None) -> int | None:
    """The generation an ingest record's value names; None when it names none."""
    try:
        found = json.loads(value or b"")
    except ValueError:
        return None
    named = found.get("generation") if isinstance(found, dict) else None
    return named if isinstance(named, int) else None


def compare_generations(
    generations: Sequence[Iterable[TopicRecord]],
    target: Iterable[TopicRecord],
    source_topic: str,
    source_cluster: str | None = None,
) -> ReplicaCheck:
    """Compare the copies of a topic deleted and created again with the records of each
    of its lives, the last one the topic now (see the module doc)."""
    copies = sorted(target, key=lambda r: (r.partition, r.offset))
    split: list[list[TopicRecord]] = [[] for _ in generations]
    examples = _Examples()
    unnamed = crossed = 0
    latest: dict[int, int] = {}
    for copy in copies:
        found = generation(copy.value)
        where = f"target partition {copy.partition} offset {copy.offset}"
        if found is None or not 0 <= found < len(generations):
            unnamed += 1
            examples.add("extra", f"{where}: of no generation of {source_topic} ({found})")
            continue
        split[found].append(copy)
        if found < latest.get(copy.partition, found):
            crossed += 1
            examples.add(
                "out_of_order",
                f"{where}: generation {found} after generation {latest[copy.partition]}",
            )
        latest[copy.partition] = max(found, latest.get(copy.partition, found))
    checks = [
        compare_replica(records, split[g], source_topic, source_cluster)
        for g, records in enumerate(generations)
    ]
    across = ReplicaCheck(
        0,
        unnamed,
        extra=unnamed,
        out_of_order=crossed,
        examples={kind: tuple(texts) for kind, texts in examples.found.items()},
    )
    return combine(*checks, across)
