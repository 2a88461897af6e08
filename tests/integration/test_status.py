"""`relay status` on the real servers: positions and pending rows per relay partition, the
oldest pending row's age, a partition held up by an open transaction, the mirror's lag,
and the checks' exit code (6) with one line on stderr and the report still printed."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from tests.integration.conftest import RELAY_PARTITIONS
from tests.integration.mirror_support import (
    MirrorEnv,
    TxProducer,
    item,
    items_mapping,
    last_stable_offsets,
    mirror_env,
)
from tests.integration.support import (
    PROJECT_ROOT,
    RelayTestEnv,
    draw,
    relay_command,
    run_relay,
    run_sql,
)
from tests.partitioning import partition_of

CHECK_FAILED = 6  # StatusCheckError.exit_code, as documented in docs/operations.md


def _keys(partition: int, count: int) -> list[bytes]:
    candidates = (f"status-{n}".encode() for n in range(10_000))
    return [k for k in candidates if partition_of(k, RELAY_PARTITIONS) == partition][:count]


def _write(env: RelayTestEnv, topic: str, key: bytes, age_s: int = 0) -> None:
    run_sql(
        env.database_url,
        "INSERT INTO outbox (topic, key, value, created_at) "
        "VALUES (:t, :k, 'v', now() - make_interval(secs => :age))",
        t=topic,
        k=key,
        age=age_s,
    )


def _status(env: RelayTestEnv, *args: str) -> dict[str, Any]:
    result = run_relay(env, "status", "--output", "json", *args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return dict(json.loads(result.stdout))


def _by_partition(document: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(p["partition"]): p for p in document["outbox"]}


def _tops(env: RelayTestEnv) -> dict[int, int]:
    draw(env.database_url)
    rows = env.sql("SELECT partition, max(position) FROM outbox_positions GROUP BY partition")
    return {int(str(p)): int(str(top)) for p, top in rows}


def test_positions_pending_rows_ages_and_the_checks(
    relay_env: RelayTestEnv, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=3)
    for key in _keys(0, 3):
        _write(relay_env, topic, key)
    old, new = _keys(1, 2)
    _write(relay_env, topic, old, age_s=3600)
    _write(relay_env, topic, new)
    _write(relay_env, topic, _keys(2, 1)[0], age_s=120)
    tops = _tops(relay_env)
    published = run_relay(relay_env, "run", "--once", "--partitions", "0")
    assert published.returncode == 0, published.stderr

    document = _status(relay_env)
    by = _by_partition(document)
    assert sorted(by) == list(range(RELAY_PARTITIONS))
    assert by[0]["position"] == by[0]["floor"] == tops[0]
    assert (by[0]["pending"], by[0]["oldest_pending_age_s"]) == (0, None)
    assert by[0]["last_publish"] is not None
    assert (by[1]["position"], by[1]["pending"]) == (0, 2)
    assert 3600 <= by[1]["oldest_pending_age_s"] < 3600 + 300
    assert (by[2]["position"], by[2]["pending"]) == (0, 1)
    assert 120 <= by[2]["oldest_pending_age_s"] < 120 + 300
    assert (by[3]["pending"], by[3]["last_publish"], by[3]["floor"]) == (0, None, 0)
    assert not any(p["held_up"] or p["held_up_by"] or p["dead_letters"] for p in by.values())
    assert document["positions_group"] == f"{relay_env.prefix}-positions"  # as configured
    assert document["schema"]["up_to_date"] is True
    assert document["mirror"] == []
    assert document["checks"] == {"max_lag": None, "max_age_s": None, "failed": []}
    some = _status(relay_env, "--partitions", "3,1")["outbox"]
    assert [(p["partition"], p["pending"]) for p in some] == [(1, 2), (3, 0)]

    # A breach: exit 6, one line on stderr naming each, and the report all the same.
    over = run_relay(relay_env, "status", "--output", "json", "--max-lag", "0")
    assert over.returncode == CHECK_FAILED, over.stderr
    assert over.stderr.splitlines() == [
        "relay: error: relay partition 1: 2 rows pending > --max-lag 0; "
        "relay partition 2: 1 row pending > --max-lag 0"
    ]
    assert _by_partition(json.loads(over.stdout))[1]["pending"] == 2
    assert run_relay(relay_env, "status", "--max-lag", "2").returncode == 0
    aged = run_relay(relay_env, "status", "--max-age", "1800")
    assert aged.returncode == CHECK_FAILED
    (line,) = aged.stderr.splitlines()
    assert re.fullmatch(
        r"relay: error: relay partition 1: oldest pending row is 3,[67]\d\d s old "
        r"> --max-age 1800",
        line,
    ), line
    assert aged.stdout.splitlines()[-1] == "checks    FAILED (--max-age 1800)"
    assert run_relay(relay_env, "status", "--max-age", "7200").returncode == 0
    # The same checks from the environment.
    by_env = run_relay(relay_env, "status", RELAY_STATUS_MAX_LAG="1", RELAY_STATUS_OUTPUT="json")
    assert by_env.returncode == CHECK_FAILED
    assert json.loads(by_env.stdout)["checks"]["failed"] == [
        "relay partition 1: 2 rows pending > --max-lag 1"
    ]
    # No secret anywhere.
    password = make_url(relay_env.database_url).password
    assert password
    for result in (published, over, aged, by_env):
        assert password not in result.stdout + result.stderr


def test_rows_not_drawn_yet_are_pending_and_an_open_transaction_holds_nothing_up(
    relay_env: RelayTestEnv, make_topic: Callable[..., str]
) -> None:
    """Committed rows count as pending before any relay drew their positions, and after;
    a writer's transaction left open holds no partition up (0017_relay_drawn_positions)."""
    topic = make_topic(partitions=1)
    libpq = relay_env.database_url.replace("postgresql+psycopg://", "postgresql://")
    key, other = _keys(3, 2)
    for n in range(2):
        run_sql(
            relay_env.database_url,
            "INSERT INTO outbox (topic, key, value) VALUES (:t, :k, 'v')",
            t=topic,
            k=key if n else other,
        )
    with psycopg.connect(libpq) as held:
        held.execute("INSERT INTO outbox (topic, key, value) VALUES (%s, %s, 'held')", (topic, key))
        by = _by_partition(_status(relay_env))
        assert by[3]["pending"] == 2
        assert not any(by[p]["held_up"] for p in sorted(by))
        draw(relay_env.database_url)
        by = _by_partition(_status(relay_env))
        assert by[3]["pending"] == 2
        assert [by[p]["pending"] for p in (0, 1, 2)] == [0, 0, 0]
        held.rollback()


def _run_status(
    env: MirrorEnv, *args: str, without: tuple[str, ...] = (), **extra: str
) -> subprocess.CompletedProcess[str]:
    environ = env.env(**extra)
    for name in without:
        del environ[name]
    return subprocess.run(
        relay_command("status", "--output", "json", *args),
        env=environ,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_mirror_part_shows_stored_offsets_lag_and_dead_letters(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("status-mirror", partitions=1)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    producer = TxProducer(bootstrap_servers)
    producer.transaction(topic, [item(1, "a", 1), (b"2", b"{not json", []), item(3, "c", 3)])
    applied = env.run("--once")
    assert applied.returncode == 0, applied.stderr
    an_hour_ago = int((time.time() - 3600) * 1000)
    producer.transaction(topic, [item(4, "d", 4), item(5, "e", 5)], timestamp_ms=an_hour_ago)
    stable = last_stable_offsets(bootstrap_servers, topic)[(topic, 0)]
    stored = env.offsets()[(topic, 0)]
    expected = {
        "group": env.group,
        "topic": topic,
        "partition": 0,
        "next_offset": stored,
        "last_stable_offset": stable,
        "lag": stable - stored,
        "dead_letters": 1,
    }
    assert expected["lag"] == 3  # two records and the transaction's commit marker

    def lag_s(document: dict[str, Any]) -> float:
        """The lag in seconds (taken out of the document): the unapplied records' age."""
        return float(document["mirror"][0].pop("lag_s"))

    mapped = _run_status(env)
    assert mapped.returncode == 0, mapped.stderr
    document = json.loads(mapped.stdout)
    assert 3600 <= lag_s(document) < 3600 + 300
    assert document["mirror"] == [expected]
    ((prefix,),) = env.sql("SELECT default_prefix FROM outbox_identity")
    assert document["positions_group"] == f"{prefix}-positions"  # the database's default
    # Without the mapping: the partitions stored in mirror_offsets, every group's.
    unmapped = _run_status(env, without=("RELAY_MIRROR_CONFIG", "RELAY_MIRROR_GROUP"))
    assert unmapped.returncode == 0, unmapped.stderr
    document = json.loads(unmapped.stdout)
    assert 3600 <= lag_s(document) < 3600 + 300
    assert document["mirror"] == [expected]
    other_group = _run_status(env, without=("RELAY_MIRROR_CONFIG",), RELAY_MIRROR_GROUP="nobody")
    assert other_group.returncode == 0, other_group.stderr
    assert json.loads(other_group.stdout)["mirror"] == []

    lagging = _run_status(env, "--max-lag", "2")
    assert lagging.returncode == CHECK_FAILED
    assert lagging.stderr.splitlines() == [
        f"relay: error: mirror {env.group} {topic}[0]: lag 3 > --max-lag 2"
    ]
    assert _run_status(env, "--max-lag", "3").returncode == 0
