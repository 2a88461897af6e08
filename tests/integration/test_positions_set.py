"""`relay positions set`: a position set by hand, through the partition's own transactional
producer (a running relay is fenced, not overwritten), with the floor following it; nothing
changes without --yes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

import relay
from relay.publishing.partition_relay import READY
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    draw,
    read_committed,
    run_relay,
    start_relay,
    wait_until,
)
from tests.integration.writes import publish_events, write_events


def _positions(admin: AdminClient, env: RelayTestEnv) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(f"{env.prefix}-positions")
    found = admin.list_consumer_group_offsets([request])[request.group_id].result(30)
    return {tp.partition: tp.offset for tp in found.topic_partitions if tp.offset >= 0}


def _floor(env: RelayTestEnv, partition: int) -> int:
    rows = env.sql("SELECT position FROM outbox_published_floor WHERE partition = :p", p=partition)
    return int(str(rows[0][0])) if rows else 0


def _rows(env: RelayTestEnv, partition: int) -> list[tuple[int, int, bytes]]:
    """(id, position, key) of the partition's rows still in the outbox, in position order."""
    draw(env.database_url)
    found = env.sql(
        "SELECT p.id, p.position, o.key FROM outbox_positions p JOIN outbox o ON o.id = p.id "
        "WHERE p.partition = :p ORDER BY p.position",
        p=partition,
    )
    return [(int(str(i)), int(str(s)), bytes(k)) for i, s, k in found]  # type: ignore[call-overload]


def _set(env: RelayTestEnv, partition: int, position: int, *yes: str) -> tuple[int, str, str]:
    result = run_relay(
        env, "positions", "set", "--partition", str(partition), "--position", str(position), *yes
    )
    return result.returncode, result.stdout, result.stderr


def test_a_position_set_back_fences_the_running_relay_and_republishes_the_rows_above_it(
    relay_env: RelayTestEnv, topic: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    ids = write_events(relay_env.database_url, topic, 200)
    first = run_relay(relay_env, "run", "--once", "--no-cleanup")  # rows stay in the outbox
    assert first.returncode == 0, first.stderr
    partition = 1
    rows = _rows(relay_env, partition)
    before = _positions(kafka_admin, relay_env)
    assert before[partition] == rows[-1][1] == _floor(relay_env, partition)
    back_to = rows[len(rows) // 2][1]
    above = {i for i, position, _ in rows if position > back_to}
    assert 0 < len(above) < len(rows)

    code, out, err = _set(relay_env, partition, back_to)
    assert code == 2, err
    assert f"would be set to {back_to}" in out
    assert "will never be published" in out and "will be published again" in out
    assert "nothing changed" in err and "--yes" in err
    assert _positions(kafka_admin, relay_env) == before
    assert _floor(relay_env, partition) == rows[-1][1]

    log = tmp_path / "relay.log"
    service = start_relay(relay_env, "run", "--no-cleanup", "--partitions", str(partition), log=log)
    try:
        wait_until(lambda: READY in log.read_text(), 60, "the relay to start")
        code, out, err = _set(relay_env, partition, back_to, "--yes")
        assert code == 0, err
        assert f"position {rows[-1][1]} -> {back_to}" in out
        assert _positions(kafka_admin, relay_env)[partition] == back_to
        assert _floor(relay_env, partition) == back_to  # lowered: the relay accepts it
        # The running relay lost the partition: its next commit is refused, and it stops.
        new = publish_events(relay_env.database_url, [relay.Event(topic, rows[0][2], {"n": -1})])
        assert service.wait(60) == 5, log.read_text()
    finally:
        if service.poll() is None:
            service.kill()
            service.wait(60)
    assert _positions(kafka_admin, relay_env)[partition] == back_to  # not overwritten

    again = run_relay(relay_env, "run", "--once", "--no-cleanup")
    assert again.returncode == 0, again.stderr
    times = Counter(r.outbox_id for r in read_committed(relay_env.bootstrap_servers, topic))
    new_ids = new - ids
    assert len(new_ids) == 1
    assert times == Counter({i: 2 if i in above else 1 for i in ids | new_ids})
    draw(relay_env.database_url)
    (new_position,) = relay_env.sql(
        "SELECT position FROM outbox_positions WHERE id = :i", i=min(new_ids)
    )
    assert _positions(kafka_admin, relay_env)[partition] == new_position[0]


def test_a_position_set_forward_skips_the_rows_below_it_and_one_never_assigned_is_refused(
    relay_env: RelayTestEnv, topic: str, kafka_admin: AdminClient
) -> None:
    ids = write_events(relay_env.database_url, topic, 100)
    partition = 2
    rows = _rows(relay_env, partition)
    forward_to = rows[len(rows) // 2][1]
    skipped = {i for i, position, _ in rows if position <= forward_to}

    code, _, err = _set(relay_env, partition, 10**12, "--yes")
    assert code == 2, err
    assert "beyond anything this database assigned" in err
    assert _floor(relay_env, partition) == 0

    code, out, err = _set(relay_env, partition, forward_to, "--yes")
    assert code == 0, err
    assert f"position 0 -> {forward_to}" in out
    assert _floor(relay_env, partition) == forward_to

    result = run_relay(relay_env, "run", "--once")
    assert result.returncode == 0, result.stderr
    consumed = read_committed(relay_env.bootstrap_servers, topic)
    assert_exactly_once_in_order(consumed, ids - skipped)
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]


def test_a_position_is_not_set_or_restored_beside_relays_with_one_transaction_per_process(
    relay_env: RelayTestEnv, topic: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    """Nothing fences a `relay run` member with one transaction per process but its
    generation: a position set beside it would be undone by its next commit. Refused
    (exit 2) with one line naming the group; nothing changes."""
    write_events(relay_env.database_url, topic, 40)
    log = tmp_path / "relay.log"
    service = start_relay(relay_env, "run", log=log)
    try:
        wait_until(lambda: "taking relay partitions [" in log.read_text(), 60, "a member")
        wait_until(lambda: relay_env.sql("SELECT count(*) FROM outbox") == [(0,)], 60, "drained")
        before = _positions(kafka_admin, relay_env)
        group = f"{relay_env.prefix}-positions"
        for args in (("set", "--partition", "1", "--position", "0", "--yes"), ("restore",)):
            refused = run_relay(relay_env, "positions", *args)
            assert refused.returncode == 2, refused.stderr
            last = refused.stderr.strip().splitlines()[-1]
            said = f"relay: error: relay positions {args[0]}: 1 member of group"
            assert last.startswith(said), last
            assert f"group {group} (`relay run`, one transaction per process)" in last, last
            assert "their next commit would undo it" in last, last
        assert _positions(kafka_admin, relay_env) == before
        assert service.poll() is None, log.read_text()
    finally:
        service.terminate()
        service.wait(60)
