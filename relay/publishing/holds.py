"""What holds one relay partition, and how its relay gets past it without breaking I2/I5.

- Rows Kafka refuses for good move to ``outbox_dead_letters`` with their reason
  (:meth:`PartitionHolds.set_aside`): an ERROR line and the observer's ``dead_lettered``.
- A row whose key has a dead letter follows it there (:meth:`PartitionHolds.followers`):
  a key's later rows never overtake its dead letter (I2); a replay brings the key's dead
  letters back together, in their order. Rows without a key have no order to keep.
- A row whose topic does not exist (or may not be written) holds the partition for at most
  ``missing_topic_wait_s`` from when it was first found missing, then becomes a dead letter
  (:meth:`PartitionHolds.wait_over`); while the topic stays missing, later rows of it go at
  once, so one missing topic stalls a partition once, for the bounded wait.
- While a batch is retried, what holds it (the row, its topic, the reason, since when) is
  recorded in the database for ``relay status`` (:meth:`PartitionHolds.stalled`), and
  cleared once a batch goes through (best effort: the database may be what failed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from relay.errors import DatabaseError, RetriableError, TopicMissingError
from relay.publishing.ports import OutboxSource, RelayObserver
from relay.publishing.types import OutboxRecord
from relay.runtime.clock import Clock
from relay.settings.relay import MISSING_TOPIC_WAIT

log = logging.getLogger("relay.publishing.partition_relay")

MISSING_TOPIC_WAIT_S: float = MISSING_TOPIC_WAIT.default  # the setting's, declared once
_UNKNOWN = (-1, "")  # what the database holds about this partition before the first clear


class PartitionHolds:
    """One relay partition's dead-lettering, missing topics and stall record (above)."""

    def __init__(
        self,
        partition: int,
        source: OutboxSource,
        observer: RelayObserver,
        clock: Clock,
        missing_topic_wait_s: float = MISSING_TOPIC_WAIT_S,
    ) -> None:
        self.partition = partition
        self._source = source
        self._observer = observer
        self._clock = clock
        self.missing_topic_wait_s = missing_topic_wait_s
        self._missing: dict[str, float] = {}  # topic -> when it was first found missing
        self._due: list[tuple[Sequence[int], str]] = []  # to move before the next batch
        self._stalled: tuple[int | None, str] | None = _UNKNOWN  # (outbox id, topic) recorded

    def later(self, outbox_ids: Sequence[int], reason: str) -> None:
        """Move rows to the dead letters before the next batch (:meth:`flush`, where a
        failure of the database is retried like the batch's own)."""
        self._due.append((outbox_ids, reason))

    def flush(self) -> None:
        while self._due:
            self.set_aside(*self._due[0])
            del self._due[0]

    def set_aside(self, outbox_ids: Sequence[int], reason: str) -> int:
        """Move rows to the dead letters with ``reason``; how many moved."""
        moved = self._source.dead_letter(self.partition, outbox_ids, reason)
        self._observer.dead_lettered(self.partition, moved)
        log.error(
            "relay partition %d: moved %d outbox row(s) %s to outbox_dead_letters: %s",
            self.partition,
            moved,
            list(outbox_ids),
            reason,
        )
        return moved

    def followers(self, records: Sequence[OutboxRecord]) -> list[OutboxRecord]:
        """``records`` without those whose key has a dead letter, which follow it there."""
        by_letter: dict[int, list[int]] = {}
        kept: list[OutboxRecord] = []
        for record in records:
            if record.follows is None or record.key is None:
                kept.append(record)
            else:
                by_letter.setdefault(record.follows, []).append(record.id)
        for letter, ids in by_letter.items():
            self.set_aside(
                ids,
                f"follows dead letter {letter} of the same key: a key's events are "
                "published in their order or not at all (replay them together)",
            )
        return kept

    def wait_left(self, exc: TopicMissingError) -> float:
        """Seconds the rows of ``exc``'s topic may still hold the partition."""
        since = self._missing.setdefault(exc.topic, self._clock.monotonic())
        return max(0.0, self.missing_topic_wait_s - (self._clock.monotonic() - since))

    def wait_over(self, exc: TopicMissingError) -> bool:
        """Whether the rows of a missing topic waited their time: then they go to the dead
        letters before the next batch, which goes on without them."""
        if not exc.topic or not exc.outbox_ids or self.wait_left(exc) > 0:
            return False
        waited = self._clock.monotonic() - self._missing[exc.topic]
        self.later(
            exc.outbox_ids,
            f"{exc.reason}; waited {waited:.0f} s (--missing-topic-wait "
            f"{self.missing_topic_wait_s:g} s): create the topic, then replay",
        )
        return True

    def published(self, records: Sequence[OutboxRecord]) -> None:
        """A batch went through: its topics exist, they would wait afresh."""
        if self._missing:
            for topic in {r.topic for r in records}:
                self._missing.pop(topic, None)

    def stalled(self, exc: RetriableError) -> None:
        """A batch failed and will be retried: record what holds the partition."""
        if isinstance(exc, TopicMissingError) and exc.outbox_ids:
            held: tuple[int | None, str] = (exc.outbox_ids[0], exc.topic)
            reason = exc.reason
        else:
            held, reason = (None, ""), str(exc)
        if self._stalled == held:
            return  # recorded (or tried: the database may be what fails), with its since
        self._stalled = held
        outbox_id, topic = held
        self._record(
            lambda: self._source.record_stall(self.partition, outbox_id, topic or None, reason)
        )

    def moving(self) -> None:
        """A batch went through (or nothing was pending): nothing holds the partition."""
        if self._stalled is not None and self._record(
            lambda: self._source.clear_stall(self.partition)
        ):
            self._stalled = None

    def _record(self, write: Callable[[], None]) -> bool:
        try:
            write()
        except (RetriableError, DatabaseError) as exc:
            log.debug("relay partition %d: recording the stall: %s", self.partition, exc)
            return False
        return True
