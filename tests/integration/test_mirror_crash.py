"""I4: kill -9 of `relay mirror` mid-batch, then a restart: every record is applied
exactly once and the stored offsets end exactly at the last stable offsets."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.mirror_support import (
    TxProducer,
    audit_count,
    audit_duplicates,
    expected_items,
    items_mapping,
    items_state,
    last_stable_offsets,
    mirror_env,
    records_of,
)

RECORDS = 1500


@pytest.mark.parametrize(
    "failpoint",
    [
        "mirror_after_apply",  # rows, dead letters and offset written, not committed
        "mirror_after_commit",  # committed, the process has not noted it yet
    ],
)
def test_kill_9_mid_batch_then_restart_applies_each_record_exactly_once(
    database_url: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    failpoint: str,
) -> None:
    topic = make_topic("mirror-crash", partitions=3)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    produced = [(n % 200, {"name": f"n{n}", "qty": n}) for n in range(RECORDS)]
    TxProducer(bootstrap_servers).in_transactions(topic, records_of(produced))
    marker = tmp_path / "fired"

    # Dies in the first batch of partition 1; other partitions may have applied some.
    first = env.run(
        "--once",
        "--batch-size",
        "100",
        RELAY_FAILPOINTS=f"{failpoint}=kill,partition=1,once={marker}",
    )
    assert first.returncode == -signal.SIGKILL, first.stderr
    applied_before = audit_count(env)
    assert applied_before < RECORDS  # none, when partition 1's batch came first

    second = env.run("--once", "--batch-size", "100")
    assert second.returncode == 0, second.stderr

    assert audit_duplicates(env) == [], "records applied twice"
    assert audit_count(env) == RECORDS, "records skipped"
    assert items_state(env) == expected_items(produced)
    assert env.offsets() == last_stable_offsets(bootstrap_servers, topic)
