"""Which routes a continuous `relay replicate` instance runs for the target partitions
the members group gives it (relay.kafka.replica_members)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from relay.kafka.replica_members import ReplicaMembership, TargetPartition
from relay.replication.types import Route
from relay.settings.replicate import load_replicate_settings


class Calls:
    def __init__(self) -> None:
        self.taken: list[list[Route]] = []
        self.given: list[list[Route]] = []
        self.subscribed: list[list[str]] = []

    def take(self, routes: Sequence[Route]) -> None:
        self.taken.append(list(routes))

    def give(self, routes: Sequence[Route]) -> None:
        self.given.append(list(routes))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    found = Calls()
    monkeypatch.setattr(ReplicaMembership, "subscribe", lambda self, t: found.subscribed.append(t))
    return found


def membership(calls: Calls) -> ReplicaMembership:
    settings = load_replicate_settings(
        environ={
            "RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS": "127.0.0.1:2",
            "RELAY_REPLICATE_TOPICS": "orders",
            "RELAY_REPLICATE_GROUP": "dr",
        }
    )
    return ReplicaMembership(settings, assigned=calls.take, revoked=calls.give)


def routes(topic: str, partitions: int) -> list[Route]:
    return [Route(topic, p, f"eu.{topic}") for p in range(partitions)]


def test_target_partitions_stand_for_their_routes_and_extra_ones_for_nothing(
    calls: Calls,
) -> None:
    members = membership(calls)
    members.follow(routes("orders", 2))
    assert calls.subscribed == [["eu.orders"]]
    members._held_more([TargetPartition("eu.orders", 1), TargetPartition("eu.orders", 2)])
    assert calls.taken == [[Route("orders", 1, "eu.orders")]]  # partition 2: no source
    members._held_less([TargetPartition("eu.orders", 2), TargetPartition("eu.orders", 1)])
    assert calls.given == [[Route("orders", 1, "eu.orders")]]


def test_a_held_partition_whose_route_the_replan_finds_starts_then(calls: Calls) -> None:
    """The group may give a target partition (the topic grown, or a new topic subscribed
    by another instance first) before this instance's plan has its source partition."""
    members = membership(calls)
    members.follow(routes("orders", 1))
    members._held_more([TargetPartition("eu.orders", 0), TargetPartition("eu.orders", 1)])
    members.follow(routes("orders", 2))  # same topics: not subscribed again
    members.follow([*routes("orders", 2), *routes("payments", 1)])
    assert calls.subscribed == [["eu.orders"], ["eu.orders", "eu.payments"]]
    assert calls.taken == [[Route("orders", 0, "eu.orders")], [Route("orders", 1, "eu.orders")]]
    assert calls.given == []
