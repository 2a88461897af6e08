"""A long-running process's INFO summary: what it published in each interval, in one
line with structured fields, instead of a line per batch."""

from __future__ import annotations

import logging

import pytest

from relay.runtime.activity import ActivityLog
from tests.fakes.publishing import FakeClock

LOGGER = "relay.test.activity"


def test_one_line_per_interval_while_something_was_done(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    activity = ActivityLog(
        logging.getLogger(LOGGER), "published", "events", "seq", every_s=60, clock=clock
    )
    with caplog.at_level(logging.INFO, logger=LOGGER):
        activity.add("p0", 10, 1, 10)
        activity.add("p3", 5, 1, 5)
        activity.tick()
        assert caplog.records == []  # not due yet
        clock.now = 30
        activity.add("p0", 20, 11, 30)
        clock.now = 61
        activity.tick()
        activity.tick()  # once per interval
        clock.now = 200
        activity.tick()  # nothing was done since: no line
        activity.add("p3", 1, 6, 6)
        activity.flush()  # at the end: what is left
        activity.flush()

    first, last = caplog.records
    assert first.getMessage() == (
        "published 35 events in 3 transactions in the last 61 s (p0: seq 1..30, p3: seq 1..5)"
    )
    assert first.levelno == logging.INFO
    fields = {k: getattr(first, k) for k in ("events", "transactions", "seconds", "ranges")}
    assert fields == {
        "events": 35,
        "transactions": 3,
        "seconds": 61.0,
        "ranges": {"p0": [1, 30], "p3": [1, 5]},
    }
    assert last.getMessage() == (
        "published 1 events in 1 transactions in the last 139 s (p3: seq 6..6)"
    )
