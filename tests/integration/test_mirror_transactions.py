"""I4: records of aborted Kafka transactions are never applied, and a still-open
transaction holds the mirror back at the last stable offset instead of leaking."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.integration.mirror_support import (
    TxProducer,
    audit_count,
    audit_duplicates,
    item,
    items_mapping,
    items_state,
    last_stable_offsets,
    mirror_env,
)


def test_aborted_never_applied_and_open_transaction_holds_the_mirror_back(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("mirror-tx", partitions=1)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    producer = TxProducer(bootstrap_servers)
    producer.transaction(topic, [item(1, "committed", 1), item(2, "committed", 2)])
    producer.transaction(topic, [item(1, "aborted", 100), item(3, "aborted", 3)], commit=False)
    producer.transaction(topic, [item(4, "committed", 4)])
    still_open = TxProducer(bootstrap_servers)
    still_open.producer.begin_transaction()
    still_open.send(topic, [item(2, "open", 200), item(5, "open", 5)])
    still_open.producer.flush(10)
    producer.transaction(topic, [item(6, "after open", 6)])  # committed, but past the LSO
    stable = last_stable_offsets(bootstrap_servers, topic)

    first = env.run("--once", timeout=60)
    assert first.returncode == 0, first.stderr
    assert items_state(env) == {
        1: ("committed", 1),
        2: ("committed", 2),
        4: ("committed", 4),
    }
    # Held at the last stable offset: the open transaction's first record.
    assert env.offsets() == stable
    assert "mirrored 3 records" in first.stdout

    # Lag is measured against the last stable offset: the open transaction is not lag.
    lag = env.run("--lag")
    assert lag.returncode == 0, lag.stderr
    assert lag.stdout.splitlines()[0].split()[-2:] == ["lag", "s"]
    assert lag.stdout.splitlines()[1].split()[-4:] == [str(stable[(topic, 0)])] * 2 + ["0", "0.0"]

    still_open.producer.commit_transaction(30)
    lag = env.run("--lag")
    stable_now = last_stable_offsets(bootstrap_servers, topic)[(topic, 0)]
    *_, stable_shown, behind, seconds = lag.stdout.splitlines()[1].split()
    assert [stable_shown, behind] == [str(stable_now), str(stable_now - stable[(topic, 0)])]
    assert 0 < float(seconds) < 300  # the open transaction's first record, produced above
    second = env.run("--once", timeout=60)
    assert second.returncode == 0, second.stderr
    assert items_state(env) == {
        1: ("committed", 1),
        2: ("open", 200),
        4: ("committed", 4),
        5: ("open", 5),
        6: ("after open", 6),
    }
    assert env.offsets() == last_stable_offsets(bootstrap_servers, topic)
    assert audit_duplicates(env) == []
    assert audit_count(env) == 6  # 3 + 3 committed records, each applied once
