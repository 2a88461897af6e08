"""Each setting is declared once, and what is derived from it agrees with what runs: the
help's default is the loaded default, computed defaults say how they are computed, and
an error names the flag or the variable, whichever was given."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from relay.errors import ConfigurationError
from relay.settings.connections import CONNECTIONS, KAFKA, METRICS, KafkaSettings
from relay.settings.mirror import MIRROR, load_mirror_settings
from relay.settings.registry import REGISTRY, load_registry_settings
from relay.settings.relay import DATABASE_PREFIX, MEMBER_ID, RELAY, load_settings
from relay.settings.replicate import REPLICATE, SELECTION, SOURCE, TARGET, load_replicate_settings
from relay.settings.spec import Given, Setting, declared_twice, whole
from relay.settings.status import STATUS

ROOT = Path(__file__).resolve().parents[3]
TABLES: dict[str, tuple[Setting, ...]] = {
    "connections": (*CONNECTIONS, KAFKA.transaction_timeout_ms),
    "metrics": METRICS,
    "relay": RELAY,
    "mirror": MIRROR,
    "replicate": (*SOURCE.settings, *TARGET.settings, *SELECTION, *REPLICATE),
    "replicate timeouts": (SOURCE.transaction_timeout_ms, SOURCE.kafka_timeout_s),
    "status": STATUS,
    "schema registry": REGISTRY,
}
EVERY = [setting for table in TABLES.values() for setting in table]
RELAY_ENV = {
    "RELAY_DATABASE_URL": "postgresql://app:hunter2@db:5432/app",
    "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k1:9092",
    "RELAY_MIRROR_CONFIG": "m.toml",
}
REPLICATE_ENV = {
    "RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS": "east:9092",
    "RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS": "dr:9092",
    "RELAY_REPLICATE_TOPICS": "orders",
}


def test_no_setting_is_declared_twice() -> None:
    assert declared_twice(EVERY) == []
    flags = [s.flag for table in TABLES.values() for s in table if s.flag]
    for name, table in TABLES.items():
        own = [s.flag for s in table if s.flag]
        assert len(own) == len(set(own)), name
    assert flags


def test_declared_twice_finds_a_second_declaration() -> None:
    twice = Setting("batch_size", "RELAY_BATCH_SIZE", "--rows", whole, 10)
    assert declared_twice([*RELAY, twice]) == ["RELAY_BATCH_SIZE", "batch_size"]


def test_every_variable_follows_the_dest_rule() -> None:
    for setting in EVERY:
        assert setting.env.startswith("RELAY_")
        assert setting.dest == setting.env.removeprefix("RELAY_").lower()


def _loaded() -> list[tuple[Setting, Any]]:
    """(setting, the value loading gives when neither flag nor variable is set)."""
    relay = load_settings(environ=RELAY_ENV)
    mirror = load_mirror_settings(environ=RELAY_ENV)
    replicate = load_replicate_settings(environ=REPLICATE_ENV)
    pairs: list[tuple[Setting, Any]] = [(s, getattr(relay, s.name)) for s in RELAY]
    pairs += [(s, getattr(mirror, s.name)) for s in MIRROR if s.name != "mapping_path"]
    pairs += [(s, getattr(replicate, s.name)) for s in REPLICATE]
    pairs += [(s, getattr(replicate.selection, s.name)) for s in SELECTION[1:]]
    pairs += [(s, getattr(relay, s.name)) for s in METRICS]
    registry = load_registry_settings(environ={"RELAY_SCHEMA_REGISTRY_URL": "http://sr:8081"})
    pairs += [(s, getattr(registry, s.name)) for s in REGISTRY[1:]]
    pairs += [
        (KAFKA.transaction_timeout_ms, relay.kafka.transaction_timeout_ms),
        (KAFKA.kafka_timeout_s, relay.kafka.request_timeout_s),
        (SOURCE.transaction_timeout_ms, replicate.target.transaction_timeout_ms),
        (SOURCE.kafka_timeout_s, replicate.source.request_timeout_s),
    ]
    return pairs


@pytest.mark.parametrize(("setting", "loaded"), _loaded(), ids=lambda v: getattr(v, "env", ""))
def test_the_help_shows_the_default_that_is_loaded(setting: Setting, loaded: Any) -> None:
    shown = setting.help_text()
    if setting.default_doc is not None:
        assert loaded is None or loaded == () or loaded == setting.default
        assert f"[{setting.env}; default: {setting.default_doc}]" in shown
    elif loaded in (None, "", ()):
        assert shown.endswith(f"[{setting.env}]")
    else:
        assert loaded == setting.default
        assert shown.endswith(
            f"[{setting.env}={str(loaded).lower() if isinstance(loaded, bool) else loaded}]"
        )


def test_the_dataclasses_defaults_are_the_declared_ones() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(KafkaSettings)}
    assert fields["transaction_timeout_ms"] == KAFKA.transaction_timeout_ms.default
    assert fields["request_timeout_s"] == KAFKA.kafka_timeout_s.default


def test_computed_defaults_say_how_the_database_computes_them() -> None:
    """The help's prefix is what migration 0004 writes to outbox_identity, and the
    positions group is that prefix with -positions, as the relay resolves it."""
    migration = (ROOT / "migrations/versions/0004_positions_guard.py").read_text()
    assert "'outbox-relay-' || left(replace(id::text, '-', ''), 8)" in migration
    assert DATABASE_PREFIX == "outbox-relay-<first 8 hex digits of its id>"
    pattern = re.escape(DATABASE_PREFIX).replace(
        re.escape("<first 8 hex digits of its id>"), "[0-9a-f]{8}"
    )
    prefix = "outbox-relay-" + "1a2b3c4d-0000-4000-8000-000000000000".replace("-", "")[:8]
    resolved = load_settings(environ=RELAY_ENV).with_database_defaults(prefix)
    assert re.fullmatch(pattern, resolved.prefix)
    assert re.fullmatch(pattern + "-positions", resolved.group)
    (prefix_setting, group_setting) = (RELAY[0], RELAY[2])
    assert f"{DATABASE_PREFIX} " in (prefix_setting.default_doc or "")
    assert f"{DATABASE_PREFIX}-positions" in (group_setting.default_doc or "")


def test_no_secret_shows_a_default_or_its_value() -> None:
    for setting in EVERY:
        if setting.secret:
            assert setting.default in (None, ())
    settings = load_mirror_settings({"kafka_properties": ["sasl.password=pw2"]}, RELAY_ENV)
    shown = str(settings.describe())
    assert "hunter2" not in shown
    assert "pw2" not in shown
    assert "app:***@db" in shown


@pytest.mark.parametrize(
    ("setting", "raw", "reason"),
    [
        (RELAY[3], "-5", "must be positive, got -5"),
        (MIRROR[2], "0", "must be positive, got 0"),
        (METRICS[0], "70000", "must be a TCP port (1..65535), got 70000"),
        (CONNECTIONS[0], "mysql://u:pw@h/db", "must point at PostgreSQL, got 'mysql'"),
        (MEMBER_ID, "pod 1", "must be 1 to 200 letters, digits, '.', '_' or '-', got 'pod 1'"),
    ],
    ids=lambda v: getattr(v, "env", str(v)),
)
def test_an_error_names_what_was_given(setting: Setting, raw: str, reason: str) -> None:
    assert setting.flag is not None
    with pytest.raises(ConfigurationError) as from_flag:
        Given({setting.dest: raw}, {}).value(setting)
    assert str(from_flag.value) == f"{setting.flag} {reason}"
    with pytest.raises(ConfigurationError) as from_variable:
        Given({}, {setting.env: raw}).value(setting)
    assert str(from_variable.value) == f"{setting.env} {reason}"
    assert "pw" not in str(from_flag.value) + str(from_variable.value)
