"""The failover checker's counts (relay.chaos.failover_checker): for a consumer group moved
to the target after its source cluster was lost, the records never processed on either
side, those processed again on the target beyond what docs/replication.md allows, and
those the target processed twice."""

from __future__ import annotations

from relay.chaos.failover_checker import count_failover

WRITTEN = [(p, o) for p in (0, 1) for o in range(10)]
ON_SOURCE = [(0, o) for o in range(4)] + [(1, o) for o in range(6)]
REST = [(0, o) for o in range(4, 10)] + [(1, o) for o in range(6, 10)]


def test_a_group_resumed_at_its_first_unprocessed_record_counts_nothing() -> None:
    count = count_failover("app", WRITTEN, ON_SOURCE, REST, allowed=0)
    assert (count.lost, count.reprocessed, count.repeated, count.ok) == (0, 0, 0, True)
    assert count.describe() == (
        "group app: 20 records written, 10 processed on the source, 10 on the target: "
        "lost=0 reprocessed=0 (allowed 0) repeated=0 OK"
    )


def test_a_group_started_at_the_targets_end_loses_what_it_had_not_processed() -> None:
    count = count_failover("app", WRITTEN, ON_SOURCE, [], allowed=0)
    assert (count.lost, count.reprocessed, count.ok) == (10, 0, False)
    assert count.describe().endswith("lost=10 reprocessed=0 (allowed 0) repeated=0 FAILED")


def test_a_group_started_from_the_beginning_reprocesses_beyond_the_allowance() -> None:
    everything = sorted(WRITTEN)
    assert not count_failover("app", WRITTEN, ON_SOURCE, everything, allowed=0).ok
    count = count_failover("app", WRITTEN, ON_SOURCE, everything, allowed=10)
    assert (count.lost, count.reprocessed, count.ok) == (0, 10, True)


def test_a_record_processed_twice_on_the_target_is_counted() -> None:
    count = count_failover("app", WRITTEN, ON_SOURCE, [*REST, REST[0]], allowed=5)
    assert (count.lost, count.reprocessed, count.repeated, count.ok) == (0, 0, 1, False)
