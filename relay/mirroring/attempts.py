"""How the consume loop tries a call again.

A transient failure (RetriableError) is retried after the retry policy's delay until the
policy gives up, or at once when the loop is stopping: GaveUpError. A batch one of whose
records the database refuses for now (RecordMayHealError: a foreign key whose parent has
not arrived yet) is waited for with the same back-off, up to ``record_retries`` times;
then it is applied once more with such records dead-lettered. Every retry and wait is
told to the observer (``retrying``), and a call that succeeds after failing (``resumed``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from relay.errors import GaveUpError, MirrorOffsetConflict, RecordMayHealError, RetriableError
from relay.mirroring.observer import LoopObserver
from relay.mirroring.reporting import tp_text
from relay.mirroring.types import ApplyResult, Batch
from relay.runtime.clock import Clock
from relay.runtime.retry import RetryPolicy

log = logging.getLogger("relay.mirroring.loop")  # where it always logged
T = TypeVar("T")
Outcome = tuple[Batch, ApplyResult] | None
"""What applying a batch gave: the batch as applied and its result; None: stopped
before anything was applied."""


@dataclass(frozen=True, slots=True)
class Attempts:
    """The loop's retry policy, clock, stop event and observer; ``record_retries``: how
    often a batch waits for a record that may heal before such records are dead-lettered."""

    retry: RetryPolicy
    clock: Clock
    stop: threading.Event
    observer: LoopObserver
    record_retries: int = 10

    def until(self, stop: threading.Event) -> Attempts:
        """The same, stopping when ``stop`` is set."""
        return replace(self, stop=stop)

    def retried(self, action: Callable[[], T], doing: str) -> T:
        """``action()``, tried again after each RetriableError but RecordMayHealError
        (which :meth:`applied` waits for); GaveUpError naming ``doing`` when the policy
        gives up or the loop is stopping."""
        attempt = 0
        while True:
            attempt += 1
            try:
                result = action()
            except RecordMayHealError:
                raise  # the record's own wait: applied()
            except RetriableError as exc:
                if self.retry.gives_up_after(attempt) or self.stop.is_set():
                    raise GaveUpError(f"{doing} failed {attempt} times: {exc}") from exc
                delay = self.retry.delay(attempt)
                log.warning("%s failed (%s); retrying in %.1f s", doing, exc, delay)
                self.observer.retrying()
                self.clock.wait(delay, self.stop)
            else:
                if attempt > 1:
                    self.observer.resumed()
                return result

    def applied(self, apply: Callable[[Batch], ApplyResult], batch: Batch) -> Outcome:
        """``apply(batch)`` (retried); while the database refuses one of its records with
        an error that may heal (RecordMayHealError), wait with back-off and try again, up
        to ``record_retries`` times, then let such records be dead-lettered (the batch as
        applied is returned with its result). None: stopped while waiting."""
        doing = f"applying {tp_text((batch.topic, batch.partition))}"
        waited = 0
        while True:
            try:
                return batch, self.retried(partial(apply, batch), doing)
            except RecordMayHealError as exc:
                waited += 1
                if waited >= self.record_retries:
                    batch = replace(batch, waited=waited)
                    continue
                delay = self.retry.delay(waited)
                log.warning("%s: %s; trying again in %.1f s", doing, exc, delay)
                self.observer.retrying()
                if self.clock.wait(delay, self.stop):
                    return None

    def applied_together(
        self,
        apply_together: Callable[[Sequence[Batch]], list[ApplyResult] | None],
        apply: Callable[[Batch], ApplyResult],
        batches: Sequence[Batch],
    ) -> list[Outcome | MirrorOffsetConflict]:
        """Each of ``batches``' outcome (as :meth:`applied`'s), or the MirrorOffsetConflict
        that refused it: ``apply_together(batches)`` (retried) in one transaction, or,
        when it refuses them (a record refused, an offset moved), each batch on its own,
        one after the other."""
        if len(batches) > 1:
            doing = "applying " + ", ".join(tp_text((b.topic, b.partition)) for b in batches)
            try:
                results = self.retried(partial(apply_together, batches), doing)
            except MirrorOffsetConflict:
                results = None  # which one moved, and what to do: found one at a time
            if results is not None:
                return list(zip(batches, results, strict=True))
        outcomes: list[Outcome | MirrorOffsetConflict] = []
        for batch in batches:
            try:
                outcomes.append(self.applied(apply, batch))
            except MirrorOffsetConflict as conflict:
                outcomes.append(conflict)
        return outcomes
