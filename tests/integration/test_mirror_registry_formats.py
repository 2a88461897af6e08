"""The mirror decodes Avro records through a schema registry into columns, on the real
PostgreSQL and Kafka with the local stand-in registry (relay.devenv.registry): a field
added upstream is reported once (the ALTER TABLE to run) and the rest of its rows
applied; a record that is itself undecodable (not the wire format, an unknown schema id)
is dead-lettered with its reason; a registry out of reach is waited for, never a reason
to dead-letter."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

import relay
from relay.devenv.registry import LocalRegistry, local_registry
from relay.devenv.waiting import wait_until
from tests.integration.mirror_support import (
    MirrorEnv,
    Record,
    TxProducer,
    last_stable_offsets,
    mirror_env,
)

ITEM_V1 = {
    "type": "record",
    "name": "Item",
    "namespace": "shop",
    "fields": [{"name": "name", "type": "string"}, {"name": "qty", "type": "int"}],
}
ITEM_V2 = ITEM_V1 | {"fields": [*ITEM_V1["fields"], {"name": "color", "type": "string"}]}  # type: ignore[list-item]
DDL = """
CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, qty integer NOT NULL,
                    version bigint NOT NULL);
"""


def _mapping(topic: str) -> str:
    return f"""
[[tables]]
table = "items"
topics = ["{topic}"]
format = "avro"
key = {{ column = "id" }}
version = {{ column = "version", source = "offset" }}

[tables.columns]
name = "name"
qty = "qty"
"""


def _records(registry: LocalRegistry, topic: str) -> list[Record]:
    reg = relay.schema_registry(environ={"RELAY_SCHEMA_REGISTRY_URL": registry.url})
    v1 = relay.avro_format(json.dumps(ITEM_V1), reg, auto_register=True)
    v2 = relay.avro_format(json.dumps(ITEM_V2), reg, auto_register=True)
    records: list[Record] = [
        (str(n).encode(), v1.serialize(topic, {"name": f"i{n}", "qty": n}, is_key=False), [])
        for n in range(10)
    ]
    records += [  # the producer moved to v2: a field the table has no column for
        (
            str(n).encode(),
            v2.serialize(topic, {"name": f"i{n}", "qty": n, "color": "red"}, is_key=False),
            [],
        )
        for n in range(10, 13)
    ]
    return records


def _env(registry: LocalRegistry) -> dict[str, str]:
    return {"RELAY_SCHEMA_REGISTRY_URL": registry.url, "RELAY_SCHEMA_REGISTRY_RETRIES": "0"}


def test_avro_records_are_applied_new_fields_reported_bad_ones_dead_lettered(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("mirror-avro")
    env = mirror_env(database_url, bootstrap_servers, tmp_path, _mapping(topic), DDL)
    with local_registry() as registry:
        records = _records(registry, topic)
        records.insert(3, (b"98", b'{"name": "json", "qty": 1}', []))  # not the wire format
        records.insert(8, (b"99", struct.pack(">bI", 0, 4242) + b"\x02", []))  # unknown id
        TxProducer(bootstrap_servers).in_transactions(topic, records, size=5)
        result = env.run("--once", **_env(registry))
    assert result.returncode == 0, result.stderr
    assert env.sql("SELECT id, name, qty FROM items ORDER BY id") == [
        (n, f"i{n}", n) for n in range(13)
    ]
    assert result.stderr.count("ALTER TABLE items ADD COLUMN color text") == 1
    dead = dict(env.sql("SELECT key, error FROM mirror_dead_letters ORDER BY key"))
    assert {bytes(k) for k in dead} == {b"98", b"99"}  # type: ignore[arg-type]
    errors = sorted(str(e) for e in dead.values())
    assert "magic byte 7b" in errors[0] or "magic byte 7b" in errors[1]
    assert any("schema id 4242 is not in the schema registry" in e for e in errors)
    assert env.offsets() == last_stable_offsets(bootstrap_servers, topic)


@pytest.mark.long(40)
def test_a_registry_outage_is_waited_for_not_dead_lettered(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("mirror-avro-down")
    env: MirrorEnv = mirror_env(database_url, bootstrap_servers, tmp_path, _mapping(topic), DDL)
    registry = LocalRegistry()
    TxProducer(bootstrap_servers).in_transactions(topic, _records(registry, topic), size=5)
    registry.stop()  # down before the mirror starts
    log = tmp_path / "mirror.log"
    mirror = env.start(log, "--once", **_env(registry))
    try:
        wait_until(lambda: "retrying" in log.read_text(), 60, "the mirror to wait for the registry")
        assert env.sql("SELECT count(*) FROM mirror_dead_letters") == [(0,)]
        back = LocalRegistry(port=registry.port, state=registry.state)  # the registry is back
        try:
            assert mirror.wait(timeout=90) == 0, log.read_text()
        finally:
            back.stop()
    finally:
        if mirror.poll() is None:
            mirror.kill()
            mirror.wait()
    assert env.sql("SELECT count(*) FROM items") == [(13,)]
    assert env.sql("SELECT count(*) FROM mirror_dead_letters") == [(0,)]


@pytest.mark.long(30)
def test_protobuf_records_are_decoded_without_the_generated_class(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    from tests.schema_examples import OrderMessage

    topic = make_topic("mirror-proto")
    mapping = _mapping(topic).replace('format = "avro"', 'format = "protobuf"')
    mapping = mapping.replace('name = "name"\nqty = "qty"', 'name = "customer"\nqty = "id"')
    env = mirror_env(database_url, bootstrap_servers, tmp_path, mapping, DDL)
    with local_registry() as registry:
        reg = relay.schema_registry(environ={"RELAY_SCHEMA_REGISTRY_URL": registry.url})
        proto = relay.protobuf_format(OrderMessage, reg, auto_register=True)
        records: list[Record] = [
            (
                str(n).encode(),
                proto.serialize(topic, OrderMessage(id=n, customer=f"c{n}"), is_key=False),
                [],
            )
            for n in range(4)
        ]
        TxProducer(bootstrap_servers).in_transactions(topic, records, size=2)
        result = env.run("--once", **_env(registry))
    assert result.returncode == 0, result.stderr
    assert env.sql("SELECT id, name, qty FROM items ORDER BY id") == [
        (n, f"c{n}", n) for n in range(4)
    ]
    assert "ALTER TABLE items ADD COLUMN total double precision" in result.stderr


@pytest.mark.long(60)
def test_a_dead_letter_of_a_registry_format_is_replayed_through_the_registry(
    database_url: str, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic("mirror-avro-replay")
    env = mirror_env(database_url, bootstrap_servers, tmp_path, _mapping(topic), DDL)
    with local_registry() as written, local_registry() as empty:
        TxProducer(bootstrap_servers).in_transactions(topic, _records(written, topic)[:2], size=2)
        # mirrored against a registry that does not know the schema ids: dead letters
        result = env.run("--once", **_env(empty))
        assert result.returncode == 0, result.stderr
        assert env.sql("SELECT count(*) FROM mirror_dead_letters") == [(2,)]
        without = env.dead_letters("replay", "--all", "--yes")
        assert without.returncode == 2, without.stderr
        assert "set RELAY_SCHEMA_REGISTRY_URL" in without.stderr
        replayed = env.relay(
            "dead-letters", "replay", "--all", "--yes", "--mirror", **_env(written)
        )
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert env.sql("SELECT id, name FROM items ORDER BY id") == [(0, "i0"), (1, "i1")]
    assert env.sql("SELECT count(*) FROM mirror_dead_letters") == [(0,)]
