"""`relay dead-letters list|show|replay|discard` (I5): a dead letter goes back through the
normal path once its cause is fixed (the outbox: published exactly once, as a new event;
the mirror: applied with the version guard), stays with its new error when it fails again,
and nothing changes without --yes."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

import relay
from relay.devenv import Endpoints
from tests.integration.mirror_support import (
    MirrorEnv,
    TxProducer,
    item,
    items_mapping,
    items_state,
    mirror_env,
)
from tests.integration.support import (
    RelayTestEnv,
    read_committed,
    run_relay,
    run_sql,
)
from tests.integration.writes import publish_events


def _dead_letters(env: RelayTestEnv | MirrorEnv, table: str) -> dict[int, str]:
    return {int(str(i)): str(e) for i, e in env.sql(f"SELECT id, error FROM {table}")}


def _fields(shown: str) -> dict[str, str]:
    """`relay dead-letters show`'s lines, by name."""
    return {
        name: value.strip()
        for name, _, value in (line.partition(":") for line in shown.splitlines())
    }


def test_an_outbox_row_kafka_refused_is_published_once_after_the_limit_is_raised(
    relay_env: RelayTestEnv, make_topic: Callable[..., str], kafka_admin: AdminClient
) -> None:
    topic = make_topic(partitions=2, config={"max.message.bytes": "4000"})
    big = b"y" * 6000
    event_id = relay.new_event_id()
    events = [
        relay.Event(topic, "k", {"n": 0}),
        relay.Event(topic, "k", big, {"trace": "abc"}, event_type="Big", event_id=event_id),
        relay.Event(topic, "k2", {"n": 2}),  # of "k" it would follow the dead letter
    ]
    ids = publish_events(relay_env.database_url, events)
    assert run_relay(relay_env, "run", "--once").returncode == 0
    ((dead_id, outbox_id),) = relay_env.sql("SELECT id, outbox_id FROM outbox_dead_letters")

    listed = run_relay(relay_env, "dead-letters", "list", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    (shown,) = json.loads(listed.stdout)["dead_letters"]
    assert (shown["id"], shown["outbox_id"], shown["topic"]) == (dead_id, outbox_id, topic)
    assert "max.message.bytes" in shown["error"] or "MSG_SIZE_TOO_LARGE" in shown["error"]
    text = run_relay(relay_env, "dead-letters", "list", "--topic", topic)
    assert text.returncode == 0 and f"{dead_id} " in text.stdout, text.stderr
    one = run_relay(relay_env, "dead-letters", "show", str(dead_id))
    assert one.returncode == 0, one.stderr
    fields = _fields(one.stdout)
    assert fields["value"] == "y" * 200 + "... (6,000 bytes; --full shows all)"
    assert (fields["header 'trace'"], fields["event type"]) == ("abc", "Big")
    assert fields["header 'event-id'"] == str(event_id)
    assert (fields["outbox id"], fields["topic"]) == (str(outbox_id), topic)
    assert "y" * 6000 in run_relay(relay_env, "dead-letters", "show", str(dead_id), "--full").stdout

    unconfirmed = run_relay(relay_env, "dead-letters", "replay", str(dead_id))
    assert unconfirmed.returncode == 2, unconfirmed.stderr
    assert "nothing changed" in unconfirmed.stderr and f"{dead_id} " in unconfirmed.stdout
    assert set(_dead_letters(relay_env, "outbox_dead_letters")) == {dead_id}
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]

    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "100000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    kafka_admin.incremental_alter_configs([resource])[resource].result(30)
    replayed = run_relay(relay_env, "dead-letters", "replay", str(dead_id), "--yes")
    assert replayed.returncode == 0, replayed.stderr
    assert f"outbox dead letter {dead_id}: back in the outbox" in replayed.stdout
    assert _dead_letters(relay_env, "outbox_dead_letters") == {}
    twice = run_relay(relay_env, "dead-letters", "replay", str(dead_id), "--yes")
    assert twice.returncode == 1
    assert f"outbox dead letter {dead_id}: not found" in twice.stderr

    assert run_relay(relay_env, "run", "--once").returncode == 0
    consumed = read_committed(relay_env.bootstrap_servers, topic)
    new_id = max(r.outbox_id for r in consumed)
    assert new_id not in ids  # a new event, after the others of its key
    assert Counter(r.outbox_id for r in consumed) == Counter((ids - {outbox_id}) | {new_id})
    (again,) = [r for r in consumed if r.outbox_id == new_id]
    assert (again.key, again.value) == (b"k", big)
    assert again.headers["trace"] == b"abc" and again.headers["event-type"] == b"Big"
    assert again.headers["event-id"] == str(event_id).encode()  # the event's id, kept
    assert again.seq == max(r.seq for r in consumed)


def _two_dead_letters(
    env: RelayTestEnv, topic: str, headers: str, *, same_key: bool = False
) -> list[int]:
    """Two rows written by plain SQL with ``headers`` that cannot become Kafka headers,
    dead-lettered by the relay; their dead letters' ids. With ``same_key`` the second row
    is of the first one's key (it would follow the first one's dead letter anyway)."""
    for n in range(2):
        env.sql(
            "INSERT INTO outbox (topic, key, value, headers) "
            "VALUES (:t, :k, '\\x7b7d', CAST(:h AS jsonb))",
            t=topic,
            k=b"k" if same_key else b"k%d" % n,
            h=headers,
        )
    assert run_relay(env, "run", "--once").returncode == 0
    return sorted(_dead_letters(env, "outbox_dead_letters"))


def test_unreadable_headers_are_kept_until_fixed_and_discard_deletes(
    relay_env: RelayTestEnv, topic: str
) -> None:
    good = publish_events(relay_env.database_url, [relay.Event(topic, "k", {"n": 0})])
    fixed, dropped = _two_dead_letters(relay_env, topic, '[["trace", "!!not base64!!"]]')
    relay_env.sql("UPDATE outbox_dead_letters SET error = 'before'")

    failed = run_relay(relay_env, "dead-letters", "replay", "--all", "--yes")
    assert failed.returncode == 1
    lines = [line for line in failed.stderr.splitlines() if "kept:" in line]
    assert len(lines) == 2 and all("not base64" in line for line in lines), failed.stderr
    assert "2 of 2 outbox dead letters not replayed" in failed.stderr
    errors = _dead_letters(relay_env, "outbox_dead_letters")
    assert set(errors) == {fixed, dropped}
    assert all("not base64" in error for error in errors.values())  # the new error
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]

    relay_env.sql(
        """UPDATE outbox_dead_letters SET headers = '[["trace", "YWJj"]]' WHERE id = :i""",
        i=fixed,
    )
    assert run_relay(relay_env, "dead-letters", "replay", str(fixed), "--yes").returncode == 0
    unconfirmed = run_relay(relay_env, "dead-letters", "discard", str(dropped))
    assert unconfirmed.returncode == 2
    assert set(_dead_letters(relay_env, "outbox_dead_letters")) == {dropped}
    discarded = run_relay(relay_env, "dead-letters", "discard", str(dropped), "--yes")
    assert discarded.returncode == 0, discarded.stderr
    assert "discarded 1 outbox dead letter\n" in discarded.stdout
    assert _dead_letters(relay_env, "outbox_dead_letters") == {}

    assert run_relay(relay_env, "run", "--once").returncode == 0
    consumed = read_committed(relay_env.bootstrap_servers, topic)
    assert len(consumed) == 2 and good < {r.outbox_id for r in consumed}
    assert sorted(r.headers.get("trace", b"") for r in consumed) == [b"", b"abc"]


def test_a_keys_dead_letters_are_replayed_together_in_their_order(
    relay_env: RelayTestEnv, topic: str
) -> None:
    """A key's later rows follow its dead letter (I2), so its dead letters go back together:
    a replay of one takes the others along, in their order, and is refused as a whole
    while one of them cannot go back."""
    first, second = _two_dead_letters(relay_env, topic, '[["a"]]', same_key=True)
    after = publish_events(relay_env.database_url, [relay.Event(topic, "k", {"n": 3})])
    assert run_relay(relay_env, "run", "--once").returncode == 0
    errors = _dead_letters(relay_env, "outbox_dead_letters")
    (third,) = set(errors) - {first, second}
    assert f"follows dead letter {first} of the same key" in errors[third]
    relay_env.sql(
        """UPDATE outbox_dead_letters SET headers = '[["trace", "YWJj"]]' WHERE id = :i""",
        i=first,
    )

    refused = run_relay(relay_env, "dead-letters", "replay", str(first), "--yes")
    assert refused.returncode == 1
    assert f"outbox dead letter {first}: kept: kept with dead letter {second}" in refused.stderr
    assert set(_dead_letters(relay_env, "outbox_dead_letters")) == {first, second, third}
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]

    relay_env.sql("UPDATE outbox_dead_letters SET headers = '[]' WHERE id = :i", i=second)
    unconfirmed = run_relay(relay_env, "dead-letters", "replay", str(third))
    assert unconfirmed.returncode == 2  # lists the key's three
    assert all(f"{i} " in unconfirmed.stdout for i in (first, second, third))
    replayed = run_relay(relay_env, "dead-letters", "replay", str(third), "--yes")
    assert replayed.returncode == 0, replayed.stderr
    assert _dead_letters(relay_env, "outbox_dead_letters") == {}
    assert run_relay(relay_env, "run", "--once").returncode == 0
    consumed = read_committed(relay_env.bootstrap_servers, topic)
    assert [(r.headers.get("trace"), r.value) for r in consumed] == [
        (b"abc", b"{}"),
        (None, b"{}"),
        (None, b'{"n":3}'),
    ]
    assert not after & {r.outbox_id for r in consumed}  # new rows, new ids
    assert [r.seq for r in consumed] == sorted(r.seq for r in consumed)


def _tool(env: MirrorEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return env.dead_letters(*args)


def test_a_mirror_record_refused_by_a_constraint_applies_after_the_fix_version_guarded(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("dead-letter-tools", partitions=1)
    env = mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([topic]))
    binary = (b"9", b"\xff\xfe{", [("trace", b"\x00\x01")])
    records = [item(1, "negative", -1), item(2, "older", -5), item(2, "newer", 3), binary]
    TxProducer(bootstrap_servers).transaction(topic, records)
    assert env.run("--once").returncode == 0
    assert items_state(env) == {2: ("newer", 3)}
    dead = {
        bytes(k).decode(): int(str(i))  # type: ignore[call-overload]
        for i, k in env.sql("SELECT id, key FROM mirror_dead_letters")
    }
    assert set(dead) == {"1", "2", "9"}

    listed = _tool(env, "list")
    assert listed.returncode == 0, listed.stderr
    assert f"{topic}[0]" in listed.stdout and "check constraint" in listed.stdout
    shown = _fields(_tool(env, "show", str(dead["9"])).stdout)
    assert (shown["value"], shown["header 'trace'"]) == ("hex fffe7b", "'\\x00\\x01'")
    env.sql("UPDATE mirror_dead_letters SET error = 'before'")

    failed = _tool(env, "replay", "--all", "--yes")
    assert failed.returncode == 1
    assert "3 of 3 mirror dead letters not replayed" in failed.stderr
    errors = _dead_letters(env, "mirror_dead_letters")
    assert "check constraint" in errors[dead["1"]] and "check constraint" in errors[dead["2"]]
    assert "value is not JSON" in errors[dead["9"]]
    assert items_state(env) == {2: ("newer", 3)}
    assert _tool(env, "discard", str(dead["9"]), "--yes").returncode == 0

    env.sql("ALTER TABLE items DROP CONSTRAINT items_qty_check")
    unconfirmed = _tool(env, "replay", "--all")
    assert unconfirmed.returncode == 2 and items_state(env) == {2: ("newer", 3)}
    replayed = _tool(env, "replay", "--all", "--yes")
    assert replayed.returncode == 0, replayed.stderr
    assert f"mirror dead letter {dead['1']}: applied" in replayed.stdout
    # The older version of item 2 (a lower offset) does not overwrite the newer row.
    assert items_state(env) == {1: ("negative", -1), 2: ("newer", 3)}
    assert _dead_letters(env, "mirror_dead_letters") == {}


def test_the_relays_and_mirrors_roles_may_use_the_tools(
    relay_env: RelayTestEnv, topic: str, login_roles: dict[str, str], endpoints: Endpoints
) -> None:
    """`outbox_relay` lists, discards and, with `outbox_writer`'s INSERT, replays; a replay
    the database refuses half-way leaves the dead letter as it was (one transaction)."""
    granted = run_relay(relay_env, "db", "roles")
    assert granted.returncode == 0, granted.stderr
    replayed, discarded = _two_dead_letters(relay_env, topic, '[["outbox-id", "MQ=="]]')
    relay_env.sql("UPDATE outbox_dead_letters SET headers = '[]' WHERE id = :i", i=replayed)
    as_relay = {"RELAY_DATABASE_URL": login_roles["outbox_relay"]}

    assert run_relay(relay_env, "dead-letters", "list", **as_relay).returncode == 0
    refused = run_relay(relay_env, "dead-letters", "replay", str(replayed), "--yes", **as_relay)
    assert refused.returncode == 3, refused.stderr
    assert "permission denied for table outbox" in refused.stderr
    assert set(_dead_letters(relay_env, "outbox_dead_letters")) == {replayed, discarded}
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]

    relay_login = sa.make_url(login_roles["outbox_relay"]).username
    run_sql(endpoints.admin_database_url, f"GRANT outbox_writer TO {relay_login}")
    done = run_relay(relay_env, "dead-letters", "replay", str(replayed), "--yes", **as_relay)
    assert done.returncode == 0, done.stderr
    gone = run_relay(relay_env, "dead-letters", "discard", "--all", "--yes", **as_relay)
    assert gone.returncode == 0, gone.stderr
    assert "discarded 1 outbox dead letter\n" in gone.stdout
    assert _dead_letters(relay_env, "outbox_dead_letters") == {}
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(1,)]

    relay_env.sql(
        'INSERT INTO mirror_dead_letters (consumer_group, topic, partition, "offset", key, '
        "value, error) VALUES ('g', :t, 0, 3, 'k', 'v', 'bad')",
        t=topic,
    )
    as_mirror = {"RELAY_DATABASE_URL": login_roles["outbox_mirror"], "RELAY_MIRROR_GROUP": "g"}
    listed = run_relay(relay_env, "dead-letters", "list", "--mirror", **as_mirror)
    assert listed.returncode == 0 and f"{topic}[0]" in listed.stdout, listed.stderr
    mirror_gone = run_relay(
        relay_env, "dead-letters", "discard", "--all", "--mirror", "--yes", **as_mirror
    )
    assert mirror_gone.returncode == 0, mirror_gone.stderr
    assert _dead_letters(relay_env, "mirror_dead_letters") == {}
