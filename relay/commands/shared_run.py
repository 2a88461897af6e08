"""`relay run` without ``--partitions``: processes on any hosts share the relay partitions
(and continuous `relay replicate` processes the source partitions, the same way).

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
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from relay.errors import ConfigurationError, KafkaError, ProducerFencedError, RelayError
from relay.runtime.clock import Clock

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)  # what is shared: a relay partition, a source partition
R = TypeVar("R")  # what running one returns
_POLL_S = 0.2  # how often the group and the workers are looked at


class _Worker:
    __slots__ = ("stop", "thread")

    def __init__(self, thread: threading.Thread, stop: threading.Event) -> None:
        self.thread, self.stop = thread, stop


_PREDECESSOR_POLL_S = 0.5  # how often a waiting worker looks whether it was stopped


class PartitionWorkers(Generic[K, R]):
    """The relay partitions (or, with ``noun``, other units) this process runs now.
    ``assigned`` and ``revoked`` are called by the membership (on the polling thread),
    :meth:`check` by the polling loop."""

    def __init__(
        self,
        run_partition: Callable[[K, threading.Event], R],
        *,
        clock: Clock,
        retake_after_s: float,
        stop_within_s: float,
        released: Callable[[K], None],
        wake: Callable[[], None],
        noun: str = "relay partition",
        thread_prefix: str = "relay-p",
    ) -> None:
        self._run = run_partition
        self._noun, self._thread_prefix = noun, thread_prefix
        self._clock = clock
        self._retake_after_s = retake_after_s
        self._stop_within_s = stop_within_s
        self._released = released
        self._wake = wake
        self._lock = threading.Lock()
        self._workers: dict[K, _Worker] = {}
        # Revoked workers that had not finished their batch when given up on: the next
        # worker of their partition here starts once they have ended.
        self._lingering: dict[K, threading.Thread] = {}
        self._assigned: set[K] = set()
        self._fenced_at: dict[K, float] = {}
        self._failure: BaseException | None = None
        self.results: list[R] = []

    @property
    def running(self) -> list[K]:
        """The units whose workers run now."""
        with self._lock:
            return list(self._workers)

    def _listed(self, partitions: Sequence[K]) -> str:
        return f"{self._noun}s [{', '.join(str(p) for p in partitions)}]"

    def assigned(self, partitions: Sequence[K]) -> None:
        log.info("taking %s", self._listed(partitions), extra={"partitions": _extra(partitions)})
        with self._lock:
            self._assigned.update(partitions)
            for partition in partitions:
                self._fenced_at.pop(partition, None)
                self._start(partition)

    def revoked(self, partitions: Sequence[K]) -> None:
        log.info(
            "handing %s on", self._listed(partitions), extra={"partitions": _extra(partitions)}
        )
        with self._lock:
            self._assigned.difference_update(partitions)
            leaving = {p: w for p in partitions if (w := self._workers.pop(p, None)) is not None}
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
                        "%s %s: still assigned here, taking it back",
                        self._noun,
                        partition,
                        extra={"partition": _field(partition)},
                    )
                    self._start(partition)

    def stop_all(self) -> None:
        with self._lock:
            leaving = dict(self._workers)
            self._workers.clear()
        self._join(leaving)

    def _start(self, partition: K) -> None:
        if partition in self._workers:
            return
        stop = threading.Event()
        thread = threading.Thread(
            target=self._body,
            args=(partition, stop, self._lingering.pop(partition, None)),
            name=f"{self._thread_prefix}{partition}",
            daemon=True,
        )
        self._workers[partition] = _Worker(thread, stop)
        thread.start()

    def _join(self, workers: dict[K, _Worker]) -> None:
        for worker in workers.values():
            worker.stop.set()
        self._wake()
        deadline = self._clock.monotonic() + self._stop_within_s
        for partition, worker in workers.items():
            worker.thread.join(max(0.0, deadline - self._clock.monotonic()))
            if worker.thread.is_alive():
                log.warning(
                    "%s did not finish its batch within %.0f s; a successor elsewhere fences "
                    "it, one here waits for it to end",
                    worker.thread.name,
                    self._stop_within_s,
                )
                with self._lock:
                    self._lingering[partition] = worker.thread

    def _body(
        self, partition: K, stop: threading.Event, predecessor: threading.Thread | None
    ) -> None:
        """Run ``partition`` once ``predecessor``, its revoked worker here, has ended: two
        at once would publish the same rows (through one producer, nothing fences)."""
        while predecessor is not None and predecessor.is_alive() and not stop.is_set():
            predecessor.join(_PREDECESSOR_POLL_S)
        if stop.is_set():
            with self._lock:
                if predecessor is not None and predecessor.is_alive():
                    self._lingering.setdefault(partition, predecessor)
                self._forget(partition, stop)
            return
        try:
            result = self._run(partition, stop)
        except ProducerFencedError as exc:
            log.warning(
                "%s %s released: %s; the others go on",
                self._noun,
                partition,
                exc,
                extra={"partition": _field(partition)},
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

    def _forget(self, partition: K, stop: threading.Event) -> None:
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


def _field(unit: object) -> object:
    """A unit as a structured log field: a relay partition as a number, others as text."""
    return unit if isinstance(unit, int) else str(unit)


def _extra(partitions: Sequence[object]) -> list[object]:
    return [_field(p) for p in partitions]


def poll_until_stopped(
    poll: Callable[[float], None],
    workers: PartitionWorkers[K, R],
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


def refuse_beside(
    members: Callable[[], int], group: str, what: str, *, command: str, units: str, work: str
) -> None:
    """A run of its own (``what``: ``relay run --once``, a Spark job, ...) beside the
    processes that share ``units`` through members group ``group`` would fence them: they
    stall and log errors while it runs. Refused while ``members()`` counts any (the
    caller skips this with ``--fence-members``)."""
    try:
        found = members()
    except KafkaError as exc:
        if exc.code != "GROUP_AUTHORIZATION_FAILED":
            raise
        # A principal allowed only its own groups: the check cannot tell, the run goes on.
        log.warning(
            "%s: cannot tell whether `%s` processes share the partitions: %s", what, command, exc
        )
        return
    if found:
        running = "1 member" if found == 1 else f"{found} members"
        verbs = (
            f"is running `{command}` and shares"
            if found == 1
            else f"are running `{command}` and share"
        )
        raise ConfigurationError(
            f"{what}: {running} of group {group} {verbs} the {units}; this run would fence "
            f"them (they stall and log errors while it runs). They {work} everything as it "
            "commits: leave it to them, or stop them first (a killed one counts until its "
            "session times out), or give --fence-members to run anyway"
        )
