"""What a replicated partition checks of each batch before it commits it, run while the
batch's copies are sent.

Before a batch commits, both topics must still be those of its position (described after
its records were read: :func:`relay.replication.position_check.same_topics`) and the
position committed on the target must still be this replicator's kind
(:func:`~relay.replication.position_check.check_owner`). Both are round trips to the
clusters; asked one after the other before the batch began, they kept the partition
waiting for each batch. Here they run on a worker thread of the partition while its
thread sends the copies into the open transaction, and the commit waits for their
answer: a batch that fails them is aborted, never committed, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from relay.replication.ports import TopicIds
from relay.replication.position_check import check_owner, same_topics
from relay.replication.types import PositionStamp, ReplicaPosition, Route


def batch_fits(
    route: Route,
    stamp: PositionStamp,
    ids: TopicIds,
    read_at: float,
    position: Callable[[], ReplicaPosition],
) -> bool:
    """False when the target topic was created again (fence and read the position again);
    ReplicaPositionError when the source topic was, or another source or prefix committed
    the position meanwhile."""
    if not same_topics(route, stamp, ids, read_at):
        return False
    check_owner(route, position(), stamp)
    return True


class BatchChecks:
    """One partition's checks, on a worker thread of its own (started at the first)."""

    def __init__(self, route: Route) -> None:
        self._route = route
        self._pool: ThreadPoolExecutor | None = None

    def start(self, check: Callable[[], bool]) -> Future[bool]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"check-{self._route}")
        return self._pool.submit(check)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
