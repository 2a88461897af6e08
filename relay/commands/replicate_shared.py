"""Continuous `relay replicate` instances share the source partitions (hosts, containers,
``--scale replicate=3``), as `relay run` processes share the relay partitions.

Each instance joins the members group on the target cluster
(:mod:`relay.kafka.replica_members`: one assignable target partition per route) and
copies only the routes the group gives it, each in a thread of its own
(:class:`~relay.commands.shared_run.PartitionWorkers`)::

    assigned  ->  start the route's replicator: it fences the route's transactional id
                  (the previous owner, or a zombie that still thinks it owns it) and
                  reads the position committed on the target, then copies
    revoked   ->  stop it after its current transaction (committed, or aborted on
                  error) and wait for it (bounded by transaction.timeout.ms), then let
                  the group hand the route on
    fenced    ->  someone else copies the route (an instance the group gave it to while
                  this one was silent, a `--once` run or a Spark task): that route ends,
                  the others go on; still assigned here a session timeout later, it is
                  started again
    any other error of a route stops the instance, as before

Every ``topic_refresh_s`` the plan is made again: the target topics of new source
topics join the subscription, and new partitions become assignable as the group sees
them. A run of its own (``--once``, the Spark job) copies every route; beside live
members it is refused unless ``--fence-members`` (:func:`refuse_beside_members`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from relay.commands.shared_run import PartitionWorkers, poll_until_stopped, refuse_beside
from relay.kafka.replica_members import ReplicaMembership, replica_members
from relay.replication.types import ReplicaResult, Route
from relay.runtime.clock import Clock
from relay.settings.replicate import ReplicateSettings

log = logging.getLogger(__name__)


def share_routes(
    settings: ReplicateSettings,
    *,
    routes: Callable[[], list[Route]],
    replan: Callable[[], None],
    copy: Callable[[Route, threading.Event], ReplicaResult],
    released: Callable[[Route], None],
    clock: Clock,
    stop: threading.Event,
) -> list[ReplicaResult]:
    """Copy the routes the members group gives this instance until ``stop`` is set.
    ``routes()`` are the plan's now; ``replan()`` makes the plan again (every
    ``topic_refresh_s``); ``copy(route, stop)`` copies one route until its stop is set."""
    session_s = settings.member_session_timeout_ms / 1000
    workers: PartitionWorkers[Route, ReplicaResult] = PartitionWorkers(
        copy,
        clock=clock,
        retake_after_s=2 * session_s,
        stop_within_s=settings.target.transaction_timeout_ms / 1000,
        released=released,
        wake=lambda: None,  # a route's reads wait --max-wait at most
        noun="source partition",
        thread_prefix="replicate-",
    )
    membership = ReplicaMembership(settings, assigned=workers.assigned, revoked=workers.revoked)
    log.info(
        "sharing the source partitions with the other members of group %s on the target",
        settings.members_group,
    )
    planned_at = clock.monotonic()

    def replan_if_due() -> bool:
        nonlocal planned_at
        if clock.monotonic() - planned_at >= settings.topic_refresh_s:
            replan()
            membership.follow(routes())
            planned_at = clock.monotonic()
        return False  # the plan changes in place: no need to start over

    membership.follow(routes())
    try:
        poll_until_stopped(membership.poll, workers, stop, replan_if_due)
    finally:
        workers.stop_all()
        membership.close()  # after the last transaction: the others take over at once
    return sorted(workers.results, key=lambda r: (r.topic, r.partition))


def refuse_beside_members(settings: ReplicateSettings, what: str) -> None:
    """A run of its own (``what``: ``relay replicate --once``, the Spark job) fences the
    continuous instances that share the source partitions: they stall and log errors
    while it runs. Refused while the members group has members, unless
    ``--fence-members``. ``settings`` with the group resolved."""
    if settings.fence_members:
        return
    refuse_beside(
        lambda: replica_members(settings),
        settings.members_group,
        what,
        command="relay replicate",
        units="source partitions",
        work="copy",
    )
