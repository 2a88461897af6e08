"""What `relay run --once` tells an operator: JSON log lines (global flags after the
subcommand), progress lines with counts when stderr is not a terminal, no password."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.integration.support import RelayTestEnv, run_relay, start_relay, wait_until
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


_SUMMARY = re.compile(r"INFO relay\.commands\.run: published (\d+) events in (\d+) transactions")


def test_a_running_relay_logs_a_summary_not_a_line_per_batch(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """400 events in batches of 10 used to log a line per batch (230 lines); at INFO a
    running relay logs its start, a summary per interval and its stop."""
    log = tmp_path / "relay.log"
    service = start_relay(relay_env, "run", "--batch-size", "10", "--log-summary", "0.5", log=log)
    try:
        write_events(relay_env.database_url, topic, 400)

        def summarised() -> int:
            return sum(int(m.group(1)) for m in _SUMMARY.finditer(log.read_text()))

        wait_until(lambda: summarised() >= 400, 60, "a summary of 400 events", log.read_text)
        service.terminate()
        assert service.wait(60) == 0, log.read_text()
    finally:
        if service.poll() is None:
            service.kill()
    text = log.read_text()
    assert summarised() == 400, text
    assert "published seq" not in text  # each batch is at DEBUG
    transactions = sum(int(m.group(2)) for m in _SUMMARY.finditer(text))
    lines = text.splitlines()
    assert transactions >= 40 and len(lines) < 40, text
    assert "published 400 records (" in lines[-1], text


def test_json_logs_carry_the_fields_of_the_start_and_summary_lines(
    relay_env: RelayTestEnv, topic: str, tmp_path: Path
) -> None:
    """A running relay's JSON lines carry their numbers as fields: the partition and the
    position it resumes after, and the summary's counts and seq ranges."""
    log = tmp_path / "relay.log"
    service = start_relay(relay_env, "run", "--log-format", "json", "--log-summary", "0.2", log=log)
    try:
        write_events(relay_env.database_url, topic, 50)

        def lines() -> list[dict[str, object]]:
            return [json.loads(line) for line in log.read_text().splitlines()]

        def summaries() -> list[dict[str, object]]:
            return [line for line in lines() if "events" in line]

        wait_until(
            lambda: sum(int(str(s["events"])) for s in summaries()) >= 50,
            60,
            "summaries of 50 events",
            log.read_text,
        )
        service.terminate()
        assert service.wait(60) == 0, log.read_text()
    finally:
        if service.poll() is None:
            service.kill()
    ready = [line for line in lines() if ": ready, " in str(line["message"])]
    assert ready and all({"partition", "position"} <= line.keys() for line in ready), ready
    summary = summaries()[0]
    assert {"transactions", "seconds", "ranges"} <= summary.keys()
    ranges = summary["ranges"]
    assert isinstance(ranges, dict) and all(k.startswith("p") for k in ranges), summary
