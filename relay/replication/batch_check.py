"""What a replicated partition checks of each batch before it commits it, run while the
batch's copies are sent.

Before a batch commits, both topics must still be those of its position (described after
its records were read: :func:`relay.replication.position_check.same_topics`) and the
position committed on the target must still be this replicator's kind
(:func:`~relay.replication.position_check.check_owner`). Both are round trips to the
clusters; asked one after the other before the batch began, they kept the partition
waiting for each batch. Here the three requests (each topic's description, the
position) are asked at once, on the run's check threads (:func:`check_pool`, one pool
for all its partitions), while the partition's own thread sends the copies into the open
transaction; the commit waits for their answers: a batch that fails them is aborted,
never committed, as before.

One pool shared by every partition cannot deadlock, even with fewer threads than checks
asked: a check submits nothing to the pool and waits for no future of it. The one wait
among checks is for a topic description under way
(:class:`relay.replication.topic_ids.SharedDescriptions`), and that description is made
by the check that began it, on a thread it already holds, waiting for nothing but the
cluster (bounded by the client's request timeout). So a check holding a thread either
runs or waits for one that runs; a queued check waits only for a thread to come free.
Only the partitions' own threads, never the pool's, wait for a batch's checks
(``tests/unit/replication/test_batch_check.py`` runs eight partitions on two threads).
Too few threads delay a commit, never block it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from typing import Any

from relay.replication.ports import TopicIds
from relay.replication.position_check import check_owner, same_topics
from relay.replication.types import PositionStamp, ReplicaPosition, Route

CHECKS_PER_BATCH = 3  # each topic's description, the position
MAX_CHECK_THREADS = 64
"""A run's check threads at most, however many partitions it copies (threads start as
checks need them)."""


def check_pool(partitions: int) -> ThreadPoolExecutor:
    """The check threads of a run of ``partitions`` partitions: one for each check a
    batch asks of each, up to :data:`MAX_CHECK_THREADS`. Its owner shuts it down."""
    threads = min(CHECKS_PER_BATCH * max(1, partitions), MAX_CHECK_THREADS)
    return ThreadPoolExecutor(threads, thread_name_prefix="check")


class _Asked:
    """Both topics' ids as the requests under way answer them (a TopicIds)."""

    def __init__(self, source: Future[str | None], target: Future[str | None]) -> None:
        self._source, self._target = source, target

    def source(self, topic: str, since: float) -> str | None:
        return self._source.result()

    def target(self, topic: str, since: float) -> str | None:
        return self._target.result()


class BatchCheck:
    """One batch's checks, under way: both topics' ids (described after ``read_at``) and
    the committed position, asked at once."""

    def __init__(
        self,
        route: Route,
        stamp: PositionStamp,
        source: Future[str | None],
        target: Future[str | None],
        position: Future[ReplicaPosition],
    ) -> None:
        self._route, self._stamp = route, stamp
        self._asked = _Asked(source, target)
        self._futures: list[Future[Any]] = [source, target, position]
        self._position = position

    def result(self) -> bool:
        """False when the target topic was created again (fence and read the position
        again); ReplicaPositionError when the source topic was, or another source or
        prefix committed the position meanwhile."""
        if not same_topics(self._route, self._stamp, self._asked, 0.0):
            return False
        check_owner(self._route, self._position.result(), self._stamp)
        return True

    def settle(self) -> None:
        """Wait until none of its requests is left running (they read through the writer)."""
        wait(self._futures)


class BatchChecks:
    """One partition's checks, on the run's check threads (``pool``, which the run shuts
    down), or on threads of its own, started at the first, when it runs alone (a Spark
    task)."""

    def __init__(self, route: Route, pool: Executor | None = None) -> None:
        self._route = route
        self._shared = pool
        self._own: ThreadPoolExecutor | None = None

    def start(
        self,
        stamp: PositionStamp,
        ids: TopicIds,
        read_at: float,
        position: Callable[[], ReplicaPosition],
    ) -> BatchCheck:
        route, pool = self._route, self._pool()
        return BatchCheck(
            route,
            stamp,
            pool.submit(ids.source, route.topic, read_at),
            pool.submit(ids.target, route.target_topic, read_at),
            pool.submit(position),
        )

    def _pool(self) -> Executor:
        if self._shared is not None:
            return self._shared
        if self._own is None:
            self._own = ThreadPoolExecutor(
                CHECKS_PER_BATCH, thread_name_prefix=f"check-{self._route}"
            )
        return self._own

    def close(self) -> None:
        """Its own threads stopped (each batch settled its checks: none is left)."""
        if self._own is not None:
            self._own.shutdown(wait=False, cancel_futures=True)
            self._own = None
