"""How far behind `relay replicate` is, in seconds: the complete-through time that stays
fresh on an idle source (--heartbeat-interval, relay_replicate_lag_seconds), and the
operator's view `relay replicate --lag` (docs/replication.md, "Watching it")."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from relay.devenv.ports import free_ports
from tests.integration.replicate_support import ReplicaEnv, new_group, write_transactions
from tests.integration.support import wait_until
from tests.integration.test_metrics import by_label, get, scrape

pytestmark = pytest.mark.integration


def lag_rows(output: str) -> dict[str, list[str]]:
    """`relay replicate --lag`'s rows by partition: the cells after the partition."""
    lines = output.strip().splitlines()
    assert lines[0].split()[:2] == ["topic", "partition"], output
    return {line.split()[1]: line.split()[2:] for line in lines[1:]}


def test_an_idle_source_shows_a_fresh_lag_in_seconds(
    replica: ReplicaEnv,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = make_topic("repl-fresh", partitions=2)
    write_transactions(replica.source, topic, transactions=2, per_transaction=5)
    (port,) = free_ports(1)
    log = tmp_path / "replicate.log"
    process = replica.start(
        "--topics", topic, "--target-prefix", "f.", "--metrics-port", str(port),
        "--heartbeat-interval", "0.5", log=log,
    )  # fmt: skip
    try:
        wait_until(lambda: get(port, "/readyz") == (200, "ready\n"), 60, "/readyz", log.read_text)

        def through() -> dict[str, float]:
            name = "relay_replicate_complete_through_timestamp_seconds"
            return by_label(scrape(port), name, "partition")

        wait_until(lambda: len(through()) == 2, 60, "both partitions vouched for", log.read_text)
        first = through()
        # Nothing is written: the time still moves, a probe every half second.
        wait_until(
            lambda: all(through()[p] >= first[p] + 2 for p in first),
            30,
            "the complete-through time to move on an idle source",
            lambda: f"{through()}\n{log.read_text()}",
        )
        lag = by_label(scrape(port), "relay_replicate_lag_seconds", "partition")
        assert set(lag) == {"0", "1"} and all(0 <= s < 5 for s in lag.values()), lag
        # The operator's view, beside the running replicator: caught up, 0 s behind.
        shown = replica.run("--topics", topic, "--target-prefix", "f.", "--lag")
        assert shown.returncode == 0, shown.stderr
        rows = lag_rows(shown.stdout)
        assert set(rows) == {"0", "1"}, shown.stdout
        for cells in rows.values():
            assert cells[0] == f"f.{topic}"
            # The position is after the last copy; the last commit marker may follow it.
            assert int(cells[1]) - int(cells[2]) == int(cells[3]) in (0, 1), shown.stdout
            assert cells[4:] == ["0.0", "caught", "up"], shown.stdout
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()


def test_lag_shows_records_and_seconds_behind_from_the_positions_time_or_the_oldest_record(
    bootstrap_servers: str,
    target_bootstrap_servers: str,
    make_topic: Callable[..., str],
) -> None:
    topic = make_topic("repl-lag", partitions=1)
    write_transactions(bootstrap_servers, topic, transactions=2, per_transaction=5, abort_every=0)
    timed = ReplicaEnv(bootstrap_servers, target_bootstrap_servers, new_group())
    untimed = ReplicaEnv(bootstrap_servers, target_bootstrap_servers, new_group())
    selection = ("--topics", topic, "--target-prefix", "lag.")
    never = untimed.run(*selection, "--lag")  # nothing copied by this group yet
    assert never.returncode == 0, never.stderr
    assert lag_rows(never.stdout)["0"][1:] == ["12", "-", "12", "-", "no", "position"]
    copied_at = time.time()
    assert timed.run(*selection, "--once").returncode == 0
    # Another group copies without a heartbeat into other target topics: no time stamped.
    assert untimed.run("--topics", topic, "--target-prefix", "lag0.", "--once",
                       "--heartbeat-interval", "0").returncode == 0  # fmt: skip
    # Ten more records, stamped a minute back (write_transactions), not copied yet.
    write_transactions(bootstrap_servers, topic, transactions=2, per_transaction=5, abort_every=0)
    shown = timed.run(*selection, "--lag")
    assert shown.returncode == 0, shown.stderr
    cells = lag_rows(shown.stdout)["0"]
    # 10 records copied (the position follows the last: 11), 13 offsets behind (10 records
    # and 3 markers); complete through the time the
    # --once run vouched for (its records are a minute older, so they say less).
    assert cells[1:4] == ["24", "11", "13"], shown.stdout
    assert cells[5:] == ["heartbeat"], shown.stdout
    assert 0 <= float(cells[4]) <= time.time() - copied_at + 1, shown.stdout
    plain = untimed.run("--topics", topic, "--target-prefix", "lag0.", "--lag")
    assert plain.returncode == 0, plain.stderr
    cells = lag_rows(plain.stdout)["0"]
    assert cells[1:4] == ["24", "11", "13"] and cells[5:] == ["oldest", "record"], plain.stdout
    assert 55 <= float(cells[4]) < 300, plain.stdout
