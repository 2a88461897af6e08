"""Where the consume loop applies its batches: in its own thread, or on one thread of
its own (``overlap``) so that the next batch is polled and decoded while the database
applies the last one (a batch's time is about half Python work, half waiting for the
database; docs/performance.md).

The lane holds one hand-over at most: one batch, or the batches of several partitions
that are applied together (in one transaction when they can be), and the loop keeps the
order of the protocol (I4):

- a batch is handed over only after the one before it was taken out with its outcome
  (:meth:`ApplyLane.take`), so batches are applied, and their offsets stored, in the
  order they were handed over;
- a batch of a partition is decoded from the offset the partition's batch in the lane
  will store, and dropped, not handed over, when that batch did not store it (another
  consumer applied the partition since, or the run stopped while it waited);
- the loop takes the outcome before anything that reads or moves a stored offset:
  assignment, revocation, the end of the run.

Without ``overlap`` the batch is applied when handed over, as a plain call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

from relay.errors import MirrorOffsetConflict
from relay.mirroring.attempts import Outcome
from relay.mirroring.types import Batch, KafkaRecord

C = TypeVar("C")
Outcomes = list[Outcome | MirrorOffsetConflict]
"""Each batch's outcome, in the order handed over (:meth:`.Attempts.applied_together`)."""


@dataclass(slots=True)
class Part(Generic[C]):
    """A batch handed to the lane: its partition's ``cursor`` (the loop's), the records it
    took from the cursor's buffer and since when the oldest of them waited."""

    cursor: C
    batch: Batch
    records: list[KafkaRecord]
    since: float | None


@dataclass(slots=True)
class InFlight(Generic[C]):
    """The batches in the lane, of distinct partitions, applied together if they can be."""

    parts: Sequence[Part[C]]
    outcome: Future[Outcomes]


class ApplyLane(Generic[C]):
    def __init__(self, overlap: bool) -> None:
        self._pool = (
            ThreadPoolExecutor(1, thread_name_prefix="relay-mirror-apply") if overlap else None
        )
        self._in_flight: InFlight[C] | None = None

    @property
    def in_flight(self) -> InFlight[C] | None:
        return self._in_flight

    def hand_over(self, apply: Callable[[], Outcomes], parts: Sequence[Part[C]]) -> None:
        """Apply ``parts``' batches (the lane must be empty: :meth:`take` first)."""
        if self._in_flight is not None:
            raise RuntimeError("a batch is still in the lane")  # a bug of the loop
        if self._pool is not None:
            outcome = self._pool.submit(apply)
        else:
            outcome = Future()
            try:
                outcome.set_result(apply())
            except Exception as exc:  # raised by outcome.result(), as from the pool
                outcome.set_exception(exc)
        self._in_flight = InFlight(parts, outcome)

    def done(self) -> bool:
        """Whether the batches in the lane (if any) have an outcome: :meth:`take` won't
        wait."""
        return self._in_flight is None or self._in_flight.outcome.done()

    def take(self) -> InFlight[C] | None:
        """The batches in the lane, taken out once they have an outcome (waiting for it);
        None when the lane is empty."""
        flight, self._in_flight = self._in_flight, None
        if flight is not None:
            wait([flight.outcome])
        return flight

    def close(self) -> None:
        """Wait for the batches in the lane (their outcome dropped), and end the thread."""
        self._in_flight = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
