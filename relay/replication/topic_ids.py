"""The topic ids every replicated partition checks before each batch
(:func:`relay.replication.position_check.same_topics`), described once for all of them.

A batch may only trust a description made at or after its records were read (a topic
deleted and created again in between would go unseen otherwise). Each partition asking
for its own description cost one round trip to each cluster per batch; here one request
per cluster describes every topic asked about so far, and answers every partition whose
read came before it began. A partition that read after the last one began waits for it
to end and shares the next, so N partitions cost about one request per cluster per
cycle, not N.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from relay.errors import RetriableError
from relay.runtime.clock import Clock, SystemClock

Describe = Callable[[Sequence[str]], Mapping[str, "str | None"]]
"""Each topic's id on one cluster (None: the topic does not exist); RetriableError when
the cluster does not answer."""


@dataclass(slots=True)
class _Description:
    """One request: its topics, when it began (it says at least that much), its answer."""

    began: float
    topics: frozenset[str]
    ids: Mapping[str, str | None] = field(default_factory=dict)  # once done, without error
    error: BaseException | None = None
    done: bool = False
    waiting: int = 0  # callers waiting for it


class SharedDescriptions:
    """Topic ids of one cluster, described by one request at a time for every caller."""

    def __init__(self, side: str, describe: Describe, clock: Clock) -> None:
        self._side = side
        self._describe = describe
        self._clock = clock
        self._changed = threading.Condition()
        self._topics: set[str] = set()  # every topic asked about: each request asks all
        self._last: _Description | None = None  # the latest answered
        self._running: _Description | None = None
        self.requests = 0  # descriptions asked (metrics, tests)

    def waiting(self) -> int:
        """Callers waiting for the request under way (tests)."""
        with self._changed:
            return 0 if self._running is None else self._running.waiting

    def id(self, topic: str, since: float) -> str | None:
        """``topic``'s id, as described at or after monotonic time ``since``."""
        with self._changed:
            self._topics.add(topic)
            while True:
                last = self._last
                if last is not None and last.began >= since and topic in last.topics:
                    return self._found(topic, last.ids)  # only answered ones are kept
                running = self._running
                if running is None:
                    mine = _Description(self._clock.monotonic(), frozenset(self._topics))
                    self._running = mine
                    self.requests += 1
                    break
                shared = running.began >= since and topic in running.topics
                running.waiting += 1
                while not running.done:
                    self._changed.wait()
                if shared:
                    if running.error is not None:  # the same failure, raised in each thread
                        raise copy.copy(running.error).with_traceback(None)
                    return self._found(topic, running.ids)
        return self._run(mine, topic)

    def _run(self, mine: _Description, topic: str) -> str | None:
        try:
            ids = dict(self._describe(sorted(mine.topics)))
        except BaseException as exc:
            with self._changed:
                mine.error, mine.done, self._running = exc, True, None
                self._changed.notify_all()
            raise
        with self._changed:
            mine.ids, mine.done, self._running = ids, True, None
            if self._last is None or mine.began >= self._last.began:
                self._last = mine
            self._changed.notify_all()
        return self._found(topic, ids)

    def _found(self, topic: str, ids: Mapping[str, str | None]) -> str:
        found = ids.get(topic)
        if found is None:
            raise RetriableError(f"{self._side} topic {topic} does not exist (deleted?)")
        return found


class SharedTopicIds:
    """Implements :class:`relay.replication.ports.TopicIds` for all the partitions of a
    run: one :class:`SharedDescriptions` per cluster."""

    def __init__(self, source: Describe, target: Describe, clock: Clock | None = None) -> None:
        clock = clock or SystemClock()
        self.sides = {
            "source": SharedDescriptions("source", source, clock),
            "target": SharedDescriptions("target", target, clock),
        }

    def source(self, topic: str, since: float) -> str | None:
        return self.sides["source"].id(topic, since)

    def target(self, topic: str, since: float) -> str | None:
        return self.sides["target"].id(topic, since)
