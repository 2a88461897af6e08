"""What a replicated partition checks of each batch before it commits it, run while the
batch's copies are sent.

Before a batch commits, both topics must still be those of its position (described after
its records were read: :func:`relay.replication.position_check.same_topics`) and the
position committed on the target must still be this replicator's kind
(:func:`~relay.replication.position_check.check_owner`). Both are round trips to the
clusters; asked one after the other before the batch began, they kept the partition
waiting for each batch. Here the three requests (each topic's description, the
position) are asked at once, on worker threads of the partition, while its thread sends
the copies into the open transaction; the commit waits for their answers: a batch that
fails them is aborted, never committed, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from relay.replication.ports import TopicIds
from relay.replication.position_check import check_owner, same_topics
from relay.replication.types import PositionStamp, ReplicaPosition, Route


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
    """One partition's checks, on worker threads of its own (started at the first)."""

    def __init__(self, route: Route) -> None:
        self._route = route
        self._pool: ThreadPoolExecutor | None = None

    def start(
        self,
        stamp: PositionStamp,
        ids: TopicIds,
        read_at: float,
        position: Callable[[], ReplicaPosition],
    ) -> BatchCheck:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(3, thread_name_prefix=f"check-{self._route}")
        route, pool = self._route, self._pool
        return BatchCheck(
            route,
            stamp,
            pool.submit(ids.source, route.topic, read_at),
            pool.submit(ids.target, route.target_topic, read_at),
            pool.submit(position),
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
