"""The independent checker of a failover after the source cluster is lost (the fault
``lose_source_cluster``, relay.chaos.failover): for one consumer group, which records it
never processed on either cluster (lost), which it processed again on the target after
processing them on the source (reprocessed, against what docs/replication.md allows), and
which it processed twice on the target (repeated).

A record is named by its source partition and offset: on the source as the group read
it, on the target by its copy's ``relay-source-offset`` header. What was written is read
from the source topic before the cluster goes, by a consumer of the checker's own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SourceRecord = tuple[int, int]  # (source partition, source offset)


@dataclass(frozen=True, slots=True)
class FailoverCount:
    group: str
    written: int  # records on the source topic when it was lost
    on_source: int  # records the group processed on the source
    on_target: int  # records it processed on the target after the failover
    lost: int  # written, processed on neither cluster
    reprocessed: int  # processed on the source, then again on the target
    repeated: int  # processed more than once on the target
    allowed: int  # how many reprocessed records the docs allow for this failover

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.repeated == 0 and self.reprocessed <= self.allowed

    def describe(self) -> str:
        return (
            f"group {self.group}: {self.written} records written, {self.on_source} processed "
            f"on the source, {self.on_target} on the target: lost={self.lost} "
            f"reprocessed={self.reprocessed} (allowed {self.allowed}) repeated={self.repeated} "
            f"{'OK' if self.ok else 'FAILED'}"
        )


def count_failover(
    group: str,
    written: Iterable[SourceRecord],
    on_source: Sequence[SourceRecord],
    on_target: Sequence[SourceRecord],
    *,
    allowed: int,
) -> FailoverCount:
    """The counts for ``group``; ``allowed``: the records the docs let it reprocess (those
    it processed on the source after the last sync before the loss; none when it stopped
    there before that sync)."""
    every = set(written)
    source, target = set(on_source), Counter(on_target)
    return FailoverCount(
        group=group,
        written=len(every),
        on_source=len(on_source),
        on_target=len(on_target),
        lost=len(every - source - set(target)),
        reprocessed=len(source & set(target)),
        repeated=sum(n - 1 for n in target.values()),
        allowed=allowed,
    )
