"""`relay replicate --lag`'s figures (relay.replication.lag): records and seconds behind,
and what the seconds are known from."""

from __future__ import annotations

from relay.cli.replicate import describe_lag
from relay.replication.lag import route_lag
from relay.replication.types import NO_POSITION, PositionStamp, ReplicaPosition
from tests.fakes.replication import ORIGIN, ROUTE

NOW = 1_800_000_100.0


def at(offset: int, as_of_s: float | None = None) -> ReplicaPosition:
    as_of = None if as_of_s is None else int(as_of_s * 1000)
    return ReplicaPosition(offset, PositionStamp(ORIGIN, as_of_ms=as_of))


def test_caught_up_when_nothing_committed_is_left_to_copy() -> None:
    assert route_lag(ROUTE, 10, at(10), None, NOW).seconds == 0.0
    only_markers = route_lag(ROUTE, 12, at(10), None, NOW)  # markers take offsets 10, 11
    assert (only_markers.records_behind, only_markers.seconds) == (2, 0.0)
    assert only_markers.basis == "caught up"


def test_behind_counts_from_the_later_of_the_positions_time_and_the_oldest_record() -> None:
    # Records written a minute ago, copied up to a heartbeat 5 s ago: the heartbeat knows more.
    row = route_lag(ROUTE, 30, at(10, NOW - 5), int((NOW - 60) * 1000), NOW)
    assert (row.records_behind, row.seconds, row.basis) == (20, 5.0, "heartbeat")
    # The heartbeat is an hour old (the source was idle), the first new record 2 s old.
    row = route_lag(ROUTE, 30, at(10, NOW - 3600), int((NOW - 2) * 1000), NOW)
    assert (row.seconds, row.basis) == (2.0, "oldest record")
    row = route_lag(ROUTE, 30, at(10), int((NOW - 2) * 1000), NOW)
    assert (row.seconds, row.basis) == (2.0, "oldest record")


def test_no_position_and_a_position_no_longer_in_the_log() -> None:
    row = route_lag(ROUTE, 30, NO_POSITION, None, NOW)
    assert (row.position, row.records_behind, row.seconds, row.basis) == (
        None,
        30,
        None,
        "no position",
    )
    gone = route_lag(ROUTE, 30, at(3), None, NOW, in_log=False)
    assert (gone.seconds, gone.basis) == (None, "position not in the source log")
    timed = route_lag(ROUTE, 30, at(3, NOW - 7), None, NOW, in_log=False)
    assert (timed.seconds, timed.basis) == (7.0, "heartbeat")


def test_the_table_lines_up_its_columns() -> None:
    rows = [
        route_lag(ROUTE, 1402, at(1401), None, NOW),
        route_lag(ROUTE, 30, NO_POSITION, None, NOW),
    ]
    assert describe_lag(rows).splitlines() == [
        "topic   partition  target topic  source end  position  behind  seconds  from",
        "orders          0  dr.orders           1402      1401       1      0.0  caught up",
        "orders          0  dr.orders             30         -      30        -  no position",
    ]
