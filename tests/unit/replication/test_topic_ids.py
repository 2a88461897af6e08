"""The topic ids the replicated partitions check before each batch, described once for
all of them (relay.replication.topic_ids): a partition is answered only by a description
that began at or after its read, and partitions that read before one began share it."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import pytest

from relay.devenv.waiting import wait_until
from relay.errors import RetriableError
from relay.replication.topic_ids import SharedDescriptions, SharedTopicIds
from tests.fakes.publishing import FakeClock


class Cluster:
    """Topic ids of a cluster; each request is recorded, and may be held until released."""

    def __init__(self, ids: dict[str, str]) -> None:
        self.ids = ids
        self.asked: list[tuple[str, ...]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.fail: Exception | None = None

    def describe(self, topics: Sequence[str]) -> Mapping[str, str | None]:
        answer = {topic: self.ids.get(topic) for topic in topics}  # as the request arrives
        self.asked.append(tuple(topics))
        assert self.hold.wait(10), "the test never released the request"
        if self.fail is not None:
            raise self.fail
        return answer


def in_thread(call: object) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def body() -> None:
        try:
            out.append(call())  # type: ignore[operator]
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


def held_request(
    ids: SharedDescriptions, cluster: Cluster, since: float
) -> tuple[threading.Thread, list[object]]:
    """A caller whose request the cluster holds until ``cluster.hold`` is set."""
    cluster.hold.clear()
    caller = in_thread(lambda: ids.id("orders", since))
    wait_until(lambda: len(cluster.asked) == 1, 10, "the first request")
    return caller


def test_a_description_that_began_after_the_read_is_reused() -> None:
    clock, cluster = FakeClock(), Cluster({"orders": "A"})
    ids = SharedDescriptions("source", cluster.describe, clock)
    clock.now = 5.0
    assert ids.id("orders", 4.0) == "A"
    assert ids.id("orders", 5.0) == "A"  # began at 5.0: as recent as that read
    assert len(cluster.asked) == 1
    cluster.ids["orders"] = "B"  # deleted and created again
    clock.now = 6.0
    assert ids.id("orders", 5.5) == "B"  # read after the last description began: ask again
    assert len(cluster.asked) == 2


def test_one_request_describes_every_topic_asked_about() -> None:
    clock, cluster = FakeClock(), Cluster({"orders": "A", "payments": "P"})
    ids = SharedDescriptions("target", cluster.describe, clock)
    assert ids.id("orders", 0.0) == "A"
    assert ids.id("payments", 0.0) == "P"  # not in the first request: one more, of both
    clock.now = 1.0
    assert ids.id("orders", 1.0) == "A"
    assert ids.id("payments", 1.0) == "P"  # answered by the same request as orders
    assert cluster.asked == [("orders",), ("orders", "payments"), ("orders", "payments")]


def test_partitions_that_read_before_a_request_began_share_it() -> None:
    clock, cluster = FakeClock(), Cluster({"orders": "A"})
    ids = SharedDescriptions("source", cluster.describe, clock)
    clock.now = 2.0
    first, first_out = held_request(ids, cluster, 1.0)
    others = [in_thread(lambda: ids.id("orders", 2.0)) for _ in range(5)]
    wait_until(lambda: ids.waiting() == 5 or len(cluster.asked) > 1, 10, "the others waiting")
    cluster.hold.set()
    for thread, _ in [(first, first_out), *others]:
        thread.join(10)
    assert [first_out, *(out for _, out in others)] == [["A"]] * 6
    assert len(cluster.asked) == 1  # six partitions, one round trip


def test_a_read_after_the_running_request_began_waits_for_the_next() -> None:
    clock, cluster = FakeClock(), Cluster({"orders": "A"})
    ids = SharedDescriptions("source", cluster.describe, clock)
    clock.now = 2.0
    first, first_out = held_request(ids, cluster, 2.0)
    cluster.ids["orders"] = "B"  # created again after that request began...
    clock.now = 3.0  # ...and a partition read its records after that
    later, later_out = in_thread(lambda: ids.id("orders", 3.0))
    wait_until(lambda: ids.waiting() == 1 or len(cluster.asked) > 1, 10, "the later read")
    cluster.hold.set()
    first.join(10)
    later.join(10)
    assert first_out == ["A"]
    assert len(cluster.asked) == 2
    assert later_out == ["B"]  # never the answer of a request that began before its read


def test_a_failed_request_fails_every_partition_that_shared_it() -> None:
    clock, cluster = FakeClock(), Cluster({"orders": "A"})
    ids = SharedDescriptions("target", cluster.describe, clock)
    cluster.fail = RetriableError("describing topic orders failed: timed out")
    first, first_out = held_request(ids, cluster, 0.0)
    other, other_out = in_thread(lambda: ids.id("orders", 0.0))
    wait_until(lambda: ids.waiting() == 1 or len(cluster.asked) > 1, 10, "the other")
    cluster.hold.set()
    first.join(10)
    other.join(10)
    assert [type(o) for o in first_out + other_out] == [RetriableError, RetriableError]
    assert len(cluster.asked) == 1
    cluster.fail = None
    assert ids.id("orders", 0.0) == "A"  # the next caller asks again


def test_a_missing_topic_is_retriable() -> None:
    topic_ids = SharedTopicIds(Cluster({}).describe, Cluster({"dr.orders": "T"}).describe)
    with pytest.raises(RetriableError, match="source topic orders does not exist"):
        topic_ids.source("orders", 0.0)
    assert topic_ids.target("dr.orders", 0.0) == "T"
