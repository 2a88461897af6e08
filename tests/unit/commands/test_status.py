"""`relay status`'s pure parts: the checks, their options and the text and JSON rendering."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from relay.cli.status import render_json, render_text
from relay.commands.status import (
    MirrorPartitionStatus,
    StatusOptions,
    StatusReport,
    failed_checks,
    load_mirror_scope,
    load_status_options,
)
from relay.errors import ConfigurationError
from relay.postgres.migrations import SchemaRevision
from relay.postgres.outbox_status import OutboxPartitionStatus, Stall
from relay.runtime.secrets import Secret
from relay.settings.connections import Connections, KafkaSettings
from relay.settings.mirror import MirrorSettings

NOW = datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC)
HEAD = "0007_commit_markers"


def _partition(
    partition: int,
    pending: int = 0,
    age: float | None = None,
    held_up_by: tuple[str, ...] = (),
) -> OutboxPartitionStatus:
    return OutboxPartitionStatus(
        partition=partition,
        position=100 + partition,
        pending=pending,
        oldest_pending_age_s=age,
        floor=100 + partition,
        last_publish=None if partition == 3 else NOW - timedelta(minutes=5),
        dead_letters=partition,
        held_up_by=held_up_by,
    )


def _report(*outbox: OutboxPartitionStatus, lag: int = 0) -> StatusReport:
    mirror = MirrorPartitionStatus("relay-mirror", "orders", 2, 40, 40 + lag, lag, 1, 12.3456)
    return StatusReport(
        checked_at=NOW,
        schema=SchemaRevision(HEAD, HEAD, newer=False, oldest_compatible=None, compatible=False),
        positions_group="outbox-relay-1a2b3c4d-positions",
        outbox=outbox,
        mirror=(mirror,),
    )


REPORT = _report(
    _partition(0),
    _partition(1, pending=1204, age=75.4),
    _partition(2, pending=1, age=3600.0, held_up_by=("backend 4711 (idle in transaction)",)),
    _partition(3),
    lag=7,
)


def test_no_limits_no_failures() -> None:
    assert failed_checks(REPORT, StatusOptions()) == []


def test_max_lag_names_each_partition_over_it_outbox_and_mirror() -> None:
    assert failed_checks(REPORT, StatusOptions(max_lag=6)) == [
        "relay partition 1: 1,204 rows pending > --max-lag 6",
        "mirror relay-mirror orders[2]: lag 7 > --max-lag 6",
    ]
    assert failed_checks(REPORT, StatusOptions(max_lag=0)) == [
        "relay partition 1: 1,204 rows pending > --max-lag 0",
        "relay partition 2: 1 row pending > --max-lag 0",
        "mirror relay-mirror orders[2]: lag 7 > --max-lag 0",
    ]
    assert failed_checks(REPORT, StatusOptions(max_lag=1204)) == []  # at the limit passes


def test_max_age_looks_at_the_oldest_pending_row() -> None:
    assert failed_checks(REPORT, StatusOptions(max_age_s=60)) == [
        "relay partition 1: oldest pending row is 75 s old > --max-age 60",
        "relay partition 2: oldest pending row is 3,600 s old > --max-age 60",
    ]
    assert failed_checks(REPORT, StatusOptions(max_age_s=3600)) == []
    empty = _report(_partition(0), _partition(1))
    assert failed_checks(empty, StatusOptions(max_lag=0, max_age_s=0)) == []


def test_options_come_from_flags_else_relay_status_variables() -> None:
    flags = {"status_output": None, "status_max_lag": None, "status_max_age_s": None}
    assert load_status_options(flags, environ={}) == StatusOptions("text", None, None)
    environ = {
        "RELAY_STATUS_OUTPUT": "JSON",
        "RELAY_STATUS_MAX_LAG": "0",
        "RELAY_STATUS_MAX_AGE_S": "2.5",
    }
    assert load_status_options(flags, environ) == StatusOptions("json", 0, 2.5)
    given = {"status_output": "text", "status_max_lag": 10, "status_max_age_s": 60.0}
    assert load_status_options(given, environ) == StatusOptions("text", 10, 60.0)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "RELAY_STATUS_OUTPUT",
            "yaml",
            "RELAY_STATUS_OUTPUT must be one of text, json, got 'yaml'",
        ),
        ("RELAY_STATUS_MAX_LAG", "-1", "RELAY_STATUS_MAX_LAG must be 0 or more, got -1"),
        ("RELAY_STATUS_MAX_LAG", "1.5", "RELAY_STATUS_MAX_LAG must be a whole number"),
        ("RELAY_STATUS_MAX_AGE_S", "soon", "RELAY_STATUS_MAX_AGE_S must be a number of seconds"),
    ],
)
def test_bad_options_are_configuration_errors_naming_the_variable(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match="^" + message):
        load_status_options({}, environ={variable: value})


def test_the_mirror_scope_is_the_mapping_when_given_else_filters_of_stored_offsets() -> None:
    def no_mapping() -> MirrorSettings:
        raise AssertionError("mirror settings loaded without a mapping")

    scope = load_mirror_scope({}, no_mapping, environ={})
    assert (scope.settings, scope.group, scope.topics) == (None, None, None)
    scope = load_mirror_scope({"mirror_topics": " a, b ,"}, no_mapping, {"RELAY_MIRROR_GROUP": "g"})
    assert (scope.settings, scope.group, scope.topics) == (None, "g", ("a", "b"))
    connections = Connections(Secret("postgresql+psycopg://u@h/d"), KafkaSettings("k:9092"))
    mapped = MirrorSettings(connections, "m.toml")
    scope = load_mirror_scope({}, lambda: mapped, environ={"RELAY_MIRROR_CONFIG": "m.toml"})
    assert scope.settings is mapped


def test_json_is_one_object_with_the_documented_keys() -> None:
    failed = failed_checks(REPORT, StatusOptions(max_lag=6))
    document = json.loads(render_json(REPORT, StatusOptions(max_lag=6), failed))
    assert list(document) == [
        "checked_at",
        "schema",
        "positions_group",
        "outbox",
        "mirror",
        "checks",
    ]
    assert document["checked_at"] == "2026-11-23T10:00:00.000+00:00"
    assert document["schema"] == {
        "current": HEAD,
        "head": HEAD,
        "up_to_date": True,
        "oldest_compatible": None,
    }
    assert document["outbox"][2] == {
        "partition": 2,
        "position": 102,
        "pending": 1,
        "oldest_pending_age_s": 3600.0,
        "floor": 102,
        "last_publish": "2026-11-23T09:55:00.000+00:00",
        "dead_letters": 2,
        "held_up": True,
        "held_up_by": ["backend 4711 (idle in transaction)"],
        "stall": None,
    }
    assert document["outbox"][3]["last_publish"] is None
    assert document["outbox"][0]["oldest_pending_age_s"] is None
    assert document["mirror"] == [
        {
            "group": "relay-mirror",
            "topic": "orders",
            "partition": 2,
            "next_offset": 40,
            "last_stable_offset": 47,
            "lag": 7,
            "dead_letters": 1,
            "lag_s": 12.346,
        }
    ]
    assert document["checks"] == {"max_lag": 6, "max_age_s": None, "failed": failed}


def test_times_are_shown_in_utc() -> None:
    elsewhere = timezone(timedelta(hours=2))
    report = StatusReport(
        NOW.astimezone(elsewhere), REPORT.schema, "g", (_partition(3),), mirror=()
    )
    document = json.loads(render_json(report, StatusOptions(), []))
    assert document["checked_at"] == "2026-11-23T10:00:00.000+00:00"
    assert document["mirror"] == []


def test_text_has_a_line_per_partition_and_the_verdict_of_the_checks() -> None:
    text = render_text(REPORT, StatusOptions(), [])
    lines = text.splitlines()
    assert lines[0] == f"schema    {HEAD} (up to date)"
    assert "positions group outbox-relay-1a2b3c4d-positions" in lines[2]
    rows = {line.split()[0]: line.split() for line in lines[4:8]}
    assert rows["1"][:5] == ["1", "101", "1,204", "75", "s"]
    assert lines[6].endswith(" 2  backend 4711 (idle in transaction)")
    assert rows["3"][-3:] == ["-", "3", "-"]  # never published, 3 dead letters, not held up
    assert lines[8] == "mirror"
    assert lines[10].split() == ["relay-mirror", "orders", "2", "40", "47", "7", "1", "12.3"]
    assert "checks" not in text  # no limits given
    failed = failed_checks(REPORT, StatusOptions(max_lag=6, max_age_s=60))
    checked = render_text(REPORT, StatusOptions(max_lag=6, max_age_s=60), failed)
    assert checked.splitlines()[-1] == "checks    FAILED (--max-lag 6, --max-age 60)"
    passed = render_text(REPORT, StatusOptions(max_lag=10_000), [])
    assert passed.splitlines()[-1] == "checks    passed (--max-lag 10,000)"


def test_a_newer_compatible_schema_says_so() -> None:
    newer = SchemaRevision("0008_x", HEAD, newer=True, oldest_compatible=HEAD, compatible=True)
    report = StatusReport(NOW, newer, "g", (_partition(0),), ())
    assert render_text(report, StatusOptions(), []).splitlines()[0] == (
        f"schema    0008_x (newer than {HEAD}; runs relays of {HEAD} or later)"
    )


def test_a_stalled_partition_shows_its_row_reason_and_since_in_utc() -> None:
    elsewhere = timezone(timedelta(hours=2))
    stall = Stall(981, "ordres", "topic 'ordres' does not exist", NOW.astimezone(elsewhere))
    stalled = replace(_partition(1), stall=stall, held_up_by=("outbox row 981 ...",))
    report = StatusReport(NOW, REPORT.schema, "g", (stalled,), mirror=())
    document = json.loads(render_json(report, StatusOptions(), []))
    assert document["outbox"][0]["stall"] == {
        "outbox_id": 981,
        "topic": "ordres",
        "reason": "topic 'ordres' does not exist",
        "since": "2026-11-23T10:00:00.000+00:00",
    }
    assert "outbox row 981 ..." in render_text(report, StatusOptions(), [])
