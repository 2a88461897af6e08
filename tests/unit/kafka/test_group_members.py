"""relay.kafka.admin.group_members: a group the listing shows without members is never
described, as librdkafka aborts the process when a request to a group coordinator cannot
be sent (confluentinc/librdkafka#4605), and the members checks run after failures too."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka.admin import AdminClient, ConsumerGroupListing, ListConsumerGroupsResult

from relay.errors import RetriableError
from relay.kafka.admin import group_members


def done(value: object) -> Future[object]:
    future: Future[object] = Future()
    future.set_result(value)
    return future


@dataclass
class Description:
    members: list[str]


@dataclass
class ListingAdmin:
    """An AdminClient's two group requests: the listing, and a description (counted)."""

    listed: list[tuple[str, ConsumerGroupState]]
    members: int = 0
    errors: list[KafkaException] = field(default_factory=list)
    described: int = 0

    def list_consumer_groups(self, **_: Any) -> Future[object]:
        valid = [ConsumerGroupListing(g, False, state) for g, state in self.listed]
        return done(ListConsumerGroupsResult(valid, self.errors))

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Future[object]]:
        self.described += 1
        return {groups[0]: done(Description(["m"] * self.members))}


def count(admin: ListingAdmin) -> int:
    return group_members(cast(AdminClient, admin), "app", 5.0, "target cluster")


@pytest.mark.parametrize(
    "listed",
    [[], [("other", ConsumerGroupState.STABLE)], [("app", ConsumerGroupState.EMPTY)],
     [("app", ConsumerGroupState.DEAD)]],
    ids=["no groups", "another group", "empty", "dead"],
)  # fmt: skip
def test_a_group_without_members_is_not_described(
    listed: list[tuple[str, ConsumerGroupState]],
) -> None:
    admin = ListingAdmin(listed)
    assert count(admin) == 0
    assert admin.described == 0


@pytest.mark.parametrize(
    "state",
    [ConsumerGroupState.STABLE, ConsumerGroupState.PREPARING_REBALANCING,
     ConsumerGroupState.UNKNOWN],
)  # fmt: skip
def test_a_group_with_members_is_described_for_how_many(state: ConsumerGroupState) -> None:
    admin = ListingAdmin([("app", state)], members=2)
    assert count(admin) == 2
    assert admin.described == 1


def test_a_broker_that_did_not_answer_the_listing_fails_the_check() -> None:
    unanswered = KafkaException(LibKafkaError(LibKafkaError._TIMED_OUT, "timed out"))
    admin = ListingAdmin([], errors=[unanswered])
    with pytest.raises(RetriableError, match="listing the consumer groups on the target cluster"):
        count(admin)
