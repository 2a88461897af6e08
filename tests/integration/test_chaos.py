"""The short chaos run (docs/chaos.md): 20 faults while service writers run, then the
independent checker. It runs its own PostgreSQL and Kafka on free ports (it kills and
restarts them), never the shared test servers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.support import PROJECT_ROOT

SHORT_RUN_LIMIT_S = 180


def test_short_chaos_run_loses_duplicates_and_reorders_nothing(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    started = time.monotonic()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "relay.cli",
            "chaos",
            "--faults",
            "20",
            "--seed",
            "7",
            "--duration-limit",
            "100",
            "--workdir",
            str(tmp_path / "chaos"),
            "--report",
            str(report_path),
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=SHORT_RUN_LIMIT_S + 60,
        check=False,
    )
    elapsed = time.monotonic() - started
    output = run.stdout + run.stderr[-5000:]
    assert run.returncode == 0, output
    summary = run.stdout.strip().splitlines()[-1]
    assert summary.startswith("checked ") and summary.endswith(" OK"), output
    assert (
        "lost=0 duplicated=0 out_of_order=0 aborted_visible=0 corrupted=0 mirror_mismatch=0"
        in summary
    )

    report = json.loads(report_path.read_text())
    assert report["ok"] is True
    assert sum(report["faults_injected"].values()) == 20, report["faults"]
    assert set(report["faults_injected"]) == {
        "kill9_relay",
        "kill9_mirror",
        "kill9_spark",
        "kill9_broker",
        "restart_postgres",
        "pause_relay",
        "pause_mirror",
    }
    assert report["mirror_checked"] is True
    assert report["ledger"] > 500 and report["events"] == report["ledger"]
    assert all(v == 0 for v in report["anomalies"].values())
    # one JSON line per fault, with an ISO timestamp
    logged = [json.loads(line) for line in (tmp_path / "chaos" / "faults.jsonl").open()]
    assert sum(1 for entry in logged if entry["injected"]) == 20
    assert all("T" in entry["at"] and entry["kind"] for entry in logged)
    assert elapsed < SHORT_RUN_LIMIT_S, f"the short chaos run took {elapsed:.0f} s"
