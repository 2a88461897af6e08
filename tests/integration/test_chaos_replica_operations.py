"""The replicator's operator faults in a chaos run of their own (docs/chaos.md): a source
topic deleted and created again, and the replicator's group deleted on the target, while
the writers, the relay, the mirror and the replicator run. The replicator must refuse
each (exit 2), the fault then takes the documented way out, and the checker must find
every record of both topics copied once: the recreated topic's old copies kept, its new
records copied from its first offset."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_chaos import run_chaos_of

KINDS = ("recreate_source_topic", "delete_replicator_group")
RUN_LIMIT_S = 600
REPLICA_COUNTS = (
    "replica_lost=0 replica_duplicated=0 replica_out_of_order=0 replica_extra=0 replica_corrupted=0"
)


@pytest.mark.long(150)
@pytest.mark.timeout(RUN_LIMIT_S + 120)
def test_a_recreated_topic_and_a_deleted_group_are_refused_then_repaired_exactly(
    tmp_path: Path,
) -> None:
    run, report, output = run_chaos_of(KINDS, tmp_path, duration_limit_s=300, limit_s=RUN_LIMIT_S)
    assert f"{REPLICA_COUNTS} OK" in run.stdout.strip().splitlines()[-1], output

    assert report["faults_injected"] == dict.fromkeys(KINDS, 1), report["faults"]
    details = {f["kind"]: f["detail"] for f in report["faults"] if f["injected"]}
    recreated = details["recreate_source_topic"]
    assert "replicator refused (exit 2)" in recreated and "deleted and created again" in recreated
    assert "--reset-recreated-topic chaos-ingest --yes (committed " in recreated, recreated
    deleted = details["delete_replicator_group"]
    if "not refused" not in deleted:  # a commit of the killed instance may restore them all
        assert "replicator refused (exit 2)" in deleted and "has no position" in deleted
        assert "--restore-positions --yes (committed " in deleted, deleted
    # Both topics' records: the outbox's topic, and the ingest topic's two lives.
    replica = report["replica"]
    assert replica["copies"] == replica["source_records"] > report["events"]
    assert report["processes"]["replicator"]["exits"].get("exit 2", 0) >= 1
