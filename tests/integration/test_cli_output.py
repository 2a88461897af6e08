"""What `relay run --once` tells an operator: JSON log lines (global flags after the
subcommand), progress lines with counts when stderr is not a terminal, no password."""

from __future__ import annotations

import json

from sqlalchemy.engine import make_url

from tests.integration.support import RelayTestEnv, run_relay
from tests.integration.writes import write_events

EVENTS = 1500


def test_run_once_logs_json_and_progress_with_counts(relay_env: RelayTestEnv, topic: str) -> None:
    write_events(relay_env.database_url, topic, EVENTS)

    result = run_relay(
        relay_env,
        "run",
        "--once",
        "--batch-size",
        "100",
        "--log-format",
        "json",  # a global flag after the subcommand
        RELAY_PROGRESS_INTERVAL_S="0.05",
    )

    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]  # every line is JSON
    assert all({"timestamp", "level", "logger", "message"} <= line.keys() for line in lines)
    progress = [line for line in lines if line["logger"] == "relay.progress"]
    assert progress, result.stderr
    last = progress[-1]
    assert last["rows_done"] == last["rows_total"] == EVENTS
    assert last["message"].startswith(f"published: {EVENTS:,} of {EVENTS:,} rows (100%)")
    assert all(line["rows_done"] <= EVENTS for line in progress)
    assert lines[-1]["message"].startswith(f"published {EVENTS} records")
    password = make_url(relay_env.database_url).password
    assert password
    assert password not in result.stderr
    assert any("***" in line["message"] for line in lines if line["message"].startswith("start"))
