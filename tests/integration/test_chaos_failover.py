"""The chaos fault ``lose_source_cluster`` (relay.chaos.failover): a source broker of its
own is killed after `relay replicate --sync-groups` synced a consumer group, the group's
consumer starts on the target by the runbook, and the independent checker counts nothing
lost, nothing reprocessed (the consumer stopped before the last sync). Without the sync,
the same checker must find the records the group had not processed lost (its consumer
starts at the target's end)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from relay.chaos.failover import PROCESSED, RECORDS, FailoverRun, run_failover
from relay.chaos.preparation import REPLICATE_SETTINGS
from relay.runtime.clock import SystemClock
from tests.integration.test_chaos import run_chaos_of

pytestmark = pytest.mark.integration

RUN_LIMIT_S = 400
FAILOVER_COUNTS = "failover_lost=0 failover_reprocessed_beyond=0 failover_repeated=0"


@pytest.mark.long(90)
@pytest.mark.timeout(RUN_LIMIT_S + 120)
def test_a_synced_group_fails_over_without_losing_or_reprocessing_a_record(
    tmp_path: Path,
) -> None:
    run, report, output = run_chaos_of(
        ("lose_source_cluster",), tmp_path, duration_limit_s=200, limit_s=RUN_LIMIT_S
    )
    assert f"{FAILOVER_COUNTS} OK" in run.stdout.strip().splitlines()[-1], output

    assert report["faults_injected"] == {"lose_source_cluster": 1}, report["faults"]
    (detail,) = (f["detail"] for f in report["faults"] if f["injected"])
    assert "after the replica held every record, then a sync round" in detail, detail
    (count,) = report["failovers"]
    assert (count["written"], count["on_source"]) == (2 * RECORDS, PROCESSED), count
    assert count["on_target"] == 2 * RECORDS - PROCESSED, count
    assert (count["lost"], count["reprocessed"], count["repeated"]) == (0, 0, 0), count


@pytest.mark.long(40)
def test_without_the_sync_the_checker_finds_the_unprocessed_records_lost(
    target_bootstrap_servers: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    name = f"it-failover-{uuid.uuid4().hex[:8]}"
    run = FailoverRun(
        target_bootstrap_servers, tmp_path, {**env, **REPLICATE_SETTINGS}, SystemClock(), name,
        sync=False,
    )  # fmt: skip
    count, _ = run_failover(run)
    assert count.on_target == 0  # no offsets on the target: it started at the end
    assert count.lost == 2 * RECORDS - PROCESSED and not count.ok, count.describe()
