"""One transaction shared by the relay partitions of a process: who is in it, and when
it ends (`relay run`'s default, one Kafka transaction per process and cycle:
:mod:`relay.kafka.member_transactions` gives it the Kafka calls).

The protocol, top to bottom, for each relay partition's thread::

    prepare(p)    announce the next batch, wait while a transaction ends (what the
                  partition reads after that commit is fresher), then read the rows;
                  withdraw(p) when there are none, or the read failed
    begin(p)      the first partition with rows opens the transaction (``opening``),
                  the others join it
    ...           each partition sends its rows into the open transaction
    finish(p, o)  hand in the new position o (None: this part failed, the transaction
                  aborts); the last partition of the transaction to arrive, once no
                  announced partition is still reading its rows, ends it for all
                  (``ending``: commit with every position, or abort), and every
                  partition of the transaction gets the same outcome

``ending`` runs without the lock: the partitions that wake while the brokers commit
announce themselves then, and the next transaction carries all of them. Without that,
each partition queued for the lock and committed a transaction of its own, one after
the other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from relay.errors import RetriableError

P = TypeVar("P")  # a partition's new position, as the transaction commits it

_OUTCOMES_KEPT = 1000  # transactions whose outcome a late waiter can still read


class SharedTransaction(Generic[P]):
    """The transactions of one producer, shared by the partitions' threads.

    ``joining`` runs under the lock at every :meth:`begin` (before ``opening``);
    ``opening`` opens a transaction; ``ending(number, positions, doomed)`` commits
    it with ``positions`` or, when ``doomed`` says why, aborts it, and returns the
    outcome (None: committed). ``wait_s``: how long a partition that handed in waits
    for the others before the transaction aborts without them."""

    def __init__(
        self,
        *,
        opening: Callable[[], None],
        ending: Callable[[int, Mapping[int, P | None], str | None], Exception | None],
        joining: Callable[[], None] = lambda: None,
        wait_s: float,
    ) -> None:
        self._opening = opening
        self._ending = ending
        self._joining = joining
        self._wait_s = wait_s
        self._cond = threading.Condition()
        self._open = False
        self._committing = False  # ``ending`` runs, without the lock
        self._number = 0  # of the open (or last) transaction
        self._coming: set[int] = set()  # announced, reading their rows
        self._joined: set[int] = set()
        self._arrived: dict[int, P | None] = {}
        self._doomed: str | None = None
        self._outcomes: dict[int, Exception | None] = {}

    def prepare(self, partition: int) -> None:
        """``partition`` reads its next rows: the open transaction does not end before
        it has joined and handed in, or withdrawn; waits while a transaction ends."""
        with self._cond:
            self._coming.add(partition)
            self._cond.wait_for(lambda: not self._committing)

    def withdraw(self, partition: int) -> None:
        """``partition`` found nothing to publish (or failed before joining)."""
        with self._cond:
            self._coming.discard(partition)
            if self._open and self._joined and self._complete():
                self._end(self._number)

    def begin(self, partition: int) -> None:
        """Join the open transaction, or open one. A partition already in the open
        transaction with its part unfinished (its send in doubt, its transaction timed
        out) aborts it first: what it sent then must not commit beside what it sends."""
        with self._cond:
            self._coming.discard(partition)
            if self._open and partition in self._joined and partition not in self._arrived:
                why = f"relay partition {partition} began again with its part unfinished"
                self._hand_in(partition, None, why)
            self._cond.wait_for(lambda: not self._committing)
            self._joining()
            if not self._open:
                self._opening()
                self._open, self._number = True, self._number + 1
                self._joined, self._arrived, self._doomed = set(), {}, None
            self._joined.add(partition)

    def finish(self, partition: int, position: P | None) -> Exception | None:
        """Hand in ``partition``'s new position (None: its part failed, the transaction
        aborts) and wait for the transaction's end; its outcome: None when committed,
        else the error (the same for every partition of the transaction)."""
        with self._cond:
            why = f"relay partition {partition} failed its part"
            return self._hand_in(partition, position, why)

    def _hand_in(self, partition: int, position: P | None, why: str) -> Exception | None:
        """:meth:`finish` with the lock held (``why``: what dooms the transaction when
        ``position`` is None)."""
        if not self._open or partition not in self._joined or partition in self._arrived:
            return None  # not in the open transaction: nothing to end
        number = self._number
        self._arrived[partition] = position
        if position is None and self._doomed is None:
            self._doomed = why
        if self._complete():
            self._end(number)
        elif (
            not self._cond.wait_for(lambda: number in self._outcomes, self._wait_s)
            and self._open
            and self._number == number
        ):
            self._coming.clear()  # reading for this long: they join the next one
            missing = sorted(self._joined - self._arrived.keys())
            if missing:  # a partition's thread stopped on an error of its own
                self._doomed = f"relay partitions {missing} never finished their part"
            self._end(number)
        self._cond.wait_for(lambda: number in self._outcomes)  # ended by another
        return self._outcomes[number]

    def _complete(self) -> bool:
        """Every partition of the open transaction handed in, and none is still reading
        rows to join it with."""
        return not self._coming and self._joined <= self._arrived.keys()

    def _end(self, number: int) -> None:
        """End open transaction ``number`` and keep its outcome until every partition of
        it has read it (a waiter may wake only after later transactions ended). Called
        with the lock held, which it lets go of while ``ending`` runs."""
        positions, doomed = dict(self._arrived), self._doomed
        self._open, self._committing = False, True
        outcome: Exception | None = RetriableError(f"transaction {number} did not end")
        self._cond.release()
        try:
            outcome = self._ending(number, positions, doomed)
        finally:
            self._cond.acquire()
            self._committing = False
            self._outcomes[number] = outcome
            self._outcomes.pop(number - _OUTCOMES_KEPT, None)
            self._cond.notify_all()
