"""The mirror's lag in seconds (`relay mirror --lag`, `relay status`): how old the oldest
record not yet applied is, from what a read of each lagging partition found."""

from __future__ import annotations

from relay.mirroring.types import LagRow, with_lag_seconds


def test_the_lag_in_seconds_is_the_age_of_the_first_record_not_applied() -> None:
    rows = [
        LagRow("t", 0, 40, 40),  # caught up: not read at all
        LagRow("t", 1, 10, 17),  # behind: its first unapplied record is a minute old
        LagRow("t", 2, None, 3),  # nothing applied yet, only markers and aborted records left
        LagRow("t", 3, 5, 9),  # the stored offset is not in the log any more
        LagRow("t", 4, 5, 9),  # a record stamped ahead of this host's clock
    ]
    found = {("t", 1): 940_000, ("t", 2): None, ("t", 4): 1_000_500}
    timed = with_lag_seconds(rows, found, now=1000.0)
    assert [row.lag_s for row in timed] == [0.0, 60.0, 0.0, None, 0.0]
    assert [row.lag for row in timed] == [0, 7, 3, 4, 4]
