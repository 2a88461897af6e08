"""Sharing the source partitions among continuous `relay replicate` instances.

Every instance joins the members group ``<replicator group>.members`` on the TARGET
cluster, subscribed to the target topics of its plan: target partition ``T'[p]`` stands
for the route ``T[p] -> T'[p]``, so the group has one assignable unit per route, and a
topic or partition the replan adds becomes assignable as soon as the subscription names
it (a target partition beyond its source's count stands for nothing). The partitions are
paused as they are assigned: the members never fetch the copies. As for `relay run`
(:mod:`relay.kafka.membership`), the group only says who *should* copy a route;
exactly-once comes from the route's ``transactional.id``, which a new owner fences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from confluent_kafka import TopicPartition

from relay.kafka.admin import admin_client, group_members
from relay.kafka.membership import Membership
from relay.replication.types import Route
from relay.settings.replicate import ReplicateSettings

Routes = Callable[[Sequence[Route]], None]


class TargetPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


class ReplicaMembership(Membership[TargetPartition]):
    """A continuous `relay replicate` instance's membership: ``assigned`` and ``revoked``
    get the routes its target partitions stand for. :meth:`follow` gives it the plan's
    routes (at start and after each replan); call it and :meth:`poll` from one thread."""

    noun = "target partitions"

    def __init__(self, settings: ReplicateSettings, *, assigned: Routes, revoked: Routes) -> None:
        super().__init__(
            settings.target,
            settings.members_group,
            settings.member_session_timeout_ms,
            assigned=self._held_more,
            revoked=self._held_less,
            paused=True,
            # A target topic the replan grew: its partitions assignable by the next replan.
            metadata_refresh_ms=max(1000, min(300_000, int(settings.topic_refresh_s * 1000))),
        )
        self._take, self._give = assigned, revoked
        self._routes: dict[TargetPartition, Route] = {}
        self._topics: list[str] = []
        self._held: set[TargetPartition] = set()  # assigned by the group
        self._started: dict[TargetPartition, Route] = {}  # handed to ``assigned``

    def follow(self, routes: Iterable[Route]) -> None:
        """The routes of the plan: their target topics subscribed (again, when the plan
        has new ones); a held partition that now stands for a route starts it."""
        self._routes = {TargetPartition(r.target_topic, r.partition): r for r in routes}
        topics = sorted({tp.topic for tp in self._routes})
        if topics != self._topics:
            self._topics = topics
            self.subscribe(topics)
        self._start(sorted(self._held))

    def _units(self, partitions: Sequence[TopicPartition]) -> list[TargetPartition]:
        return [TargetPartition(tp.topic, tp.partition) for tp in partitions]

    def _held_more(self, partitions: Sequence[TargetPartition]) -> None:
        self._held.update(partitions)
        self._start(partitions)

    def _start(self, partitions: Sequence[TargetPartition]) -> None:
        fresh = {
            tp: route
            for tp in partitions
            if tp not in self._started and (route := self._routes.get(tp)) is not None
        }
        if fresh:
            self._started.update(fresh)
            self._take(list(fresh.values()))

    def _held_less(self, partitions: Sequence[TargetPartition]) -> None:
        self._held.difference_update(partitions)
        if routes := [r for tp in partitions if (r := self._started.pop(tp, None)) is not None]:
            self._give(routes)


def replica_members(settings: ReplicateSettings) -> int:
    """How many continuous `relay replicate` instances are members of the group now (a
    killed one stays a member until its session times out)."""
    admin = admin_client(settings.target)
    return group_members(
        admin, settings.members_group, settings.target.request_timeout_s, "target cluster"
    )
