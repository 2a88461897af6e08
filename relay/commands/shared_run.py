"""`relay run` without ``--partitions``: processes on any hosts share the relay partitions.

The members group (:mod:`relay.kafka.membership`) says which relay partitions this
process holds; each one runs in a thread of its own, with a stop event of its own::

    assigned  ->  start the partition's worker: it fences the previous owner and reads
                  the committed position (I3), then publishes as with fixed partitions
    revoked   ->  stop the worker after its current batch and wait for it (bounded),
                  then let the group hand the partition on
    fenced    ->  someone else took the partition (a member that the group gave it to
                  while this process was silent, or a `--once` run or Spark task): the
                  worker ends and the other partitions go on; if the group still gives
                  the partition to this process, it is started again after a session
                  timeout, when a stale assignment would have been revoked
    any other error of a worker stops the process, as with fixed partitions

At shutdown the workers finish their batches before the process leaves the group, so
the members that take the partitions over do not need to fence a batch in flight.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from relay.errors import ProducerFencedError, RelayError
from relay.publishing.types import DrainResult
from relay.runtime.clock import Clock

log = logging.getLogger(__name__)

RunPartition = Callable[[int, threading.Event], DrainResult]
_POLL_S = 0.2  # how often the group and the workers are looked at


class _Worker:
    __slots__ = ("stop", "thread")

    def __init__(self, thread: threading.Thread, stop: threading.Event) -> None:
        self.thread, self.stop = thread, stop


class PartitionWorkers:
    """The relay partitions this process runs now. ``assigned`` and ``revoked`` are called
    by the membership (on the polling thread), :meth:`check` by the polling loop."""

    def __init__(
        self,
        run_partition: RunPartition,
        *,
        clock: Clock,
        retake_after_s: float,
        stop_within_s: float,
        released: Callable[[int], None],
        wake: Callable[[], None],
    ) -> None:
        self._run = run_partition
        self._clock = clock
        self._retake_after_s = retake_after_s
        self._stop_within_s = stop_within_s
        self._released = released
        self._wake = wake
        self._lock = threading.Lock()
        self._workers: dict[int, _Worker] = {}
        self._assigned: set[int] = set()
        self._fenced_at: dict[int, float] = {}
        self._failure: BaseException | None = None
        self.results: list[DrainResult] = []

    def assigned(self, partitions: Sequence[int]) -> None:
        log.info(
            "taking relay partitions %s", list(partitions), extra={"partitions": list(partitions)}
        )
        with self._lock:
            self._assigned.update(partitions)
            for partition in partitions:
                self._fenced_at.pop(partition, None)
                self._start(partition)

    def revoked(self, partitions: Sequence[int]) -> None:
        log.info(
            "handing relay partitions %s on",
            list(partitions),
            extra={"partitions": list(partitions)},
        )
        with self._lock:
            self._assigned.difference_update(partitions)
            leaving = [w for p in partitions if (w := self._workers.pop(p, None)) is not None]
            for partition in partitions:
                self._fenced_at.pop(partition, None)
        self._join(leaving)
        for partition in partitions:
            self._released(partition)

    def check(self) -> None:
        """Raise a worker's fatal error; start again the partitions that were fenced while
        still assigned here, once a stale assignment would have been revoked."""
        with self._lock:
            if self._failure is not None:
                raise self._failure
            now = self._clock.monotonic()
            for partition, at in list(self._fenced_at.items()):
                if now - at >= self._retake_after_s and partition in self._assigned:
                    del self._fenced_at[partition]
                    log.info(
                        "relay partition %d: still assigned here, taking it back",
                        partition,
                        extra={"partition": partition},
                    )
                    self._start(partition)

    def stop_all(self) -> None:
        with self._lock:
            leaving = list(self._workers.values())
            self._workers.clear()
        self._join(leaving)

    def _start(self, partition: int) -> None:
        if partition in self._workers:
            return
        stop = threading.Event()
        thread = threading.Thread(
            target=self._body, args=(partition, stop), name=f"relay-p{partition}", daemon=True
        )
        self._workers[partition] = _Worker(thread, stop)
        thread.start()

    def _join(self, workers: Sequence[_Worker]) -> None:
        for worker in workers:
            worker.stop.set()
        self._wake()
        deadline = self._clock.monotonic() + self._stop_within_s
        for worker in workers:
            worker.thread.join(max(0.0, deadline - self._clock.monotonic()))
            if worker.thread.is_alive():
                log.warning(
                    "%s did not finish its batch within %.0f s; its successor fences it",
                    worker.thread.name,
                    self._stop_within_s,
                )

    def _body(self, partition: int, stop: threading.Event) -> None:
        try:
            result = self._run(partition, stop)
        except ProducerFencedError as exc:
            log.warning(
                "relay partition %d released: %s; the others go on",
                partition,
                exc,
                extra={"partition": partition},
            )
            with self._lock:
                self._fenced_at[partition] = self._clock.monotonic()
                self._forget(partition, stop)
            self._released(partition)
        except BaseException as exc:
            with self._lock:
                self._failure = self._failure or exc
                self._forget(partition, stop)
        else:
            with self._lock:
                self.results.append(result)
                self._forget(partition, stop)

    def _forget(self, partition: int, stop: threading.Event) -> None:
        worker = self._workers.get(partition)
        if worker is not None and worker.stop is stop:
            del self._workers[partition]


class CountWatch:
    """Whether the relay partition count moved away from ``count`` (asked every few
    seconds): the process then starts over, so that the new partitions get members."""

    def __init__(
        self, counted: Callable[[], int], count: int, clock: Clock, every_s: float = 5.0
    ) -> None:
        self._counted, self._count, self._clock, self._every_s = counted, count, clock, every_s
        self._asked = clock.monotonic()

    def __call__(self) -> bool:
        now = self._clock.monotonic()
        if now - self._asked < self._every_s:
            return False
        self._asked = now
        try:
            found = self._counted()
        except RelayError as exc:  # asked again later; the partitions go on meanwhile
            log.warning("reading the relay partition count: %s", exc)
            return False
        if found != self._count:
            log.info("the relay partition count changed from %d to %d", self._count, found)
        return found != self._count


def poll_until_stopped(
    poll: Callable[[float], None],
    workers: PartitionWorkers,
    stop: threading.Event,
    count_changed: Callable[[], bool],
) -> bool:
    """The polling loop of a sharing process: the group's callbacks run inside ``poll``.
    True when it ended because the relay partition count changed."""
    while not stop.is_set():
        poll(_POLL_S)
        workers.check()
        if count_changed():
            return True
    return False
