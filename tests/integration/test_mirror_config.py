"""I5 for the mirror's configuration: a mapping that does not match the database or
Kafka, or an environment that is not ready, fails fast with one clear line, a non-zero
exit code and no secret in the output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.integration.mirror_support import MirrorEnv, items_mapping, mirror_env
from tests.integration.support import run_sql

SECRET = "s3cr3t-Mirr0r-pw"


@pytest.fixture
def mirror_topic(make_topic: Callable[..., str]) -> str:
    return make_topic("mirror-config", partitions=1)


@pytest.fixture
def env(database_url: str, bootstrap_servers: str, mirror_topic: str, tmp_path: Path) -> MirrorEnv:
    return mirror_env(database_url, bootstrap_servers, tmp_path, items_mapping([mirror_topic]))


def _mapping(env: MirrorEnv, topic: str, text: str) -> dict[str, str]:
    path = env.mapping.with_name("bad.toml")
    path.write_text(text.replace("TOPIC", topic))
    return {"RELAY_MIRROR_CONFIG": str(path)}


TABLE = '[[tables]]\ntable = "{table}"\ntopics = ["TOPIC"]\nkey = {{ column = "{key}" }}\n'
VERSION = 'version = {{ column = "{version}", source = "offset" }}\n'


@pytest.mark.parametrize(
    ("mapping", "code", "message"),
    [
        ("[[tables]\n", 2, "is not valid TOML"),
        ("[[tables]]\ntable = 'items'\n", 2, "topics: expected a non-empty list"),
        (
            TABLE.format(table="itemz", key="id") + VERSION.format(version="version"),
            2,
            "table itemz does not exist in the database",
        ),
        (
            TABLE.format(table="items", key="id") + VERSION.format(version="versoin"),
            2,
            "table items has no column versoin",
        ),
        (
            TABLE.format(table="items", key="name") + VERSION.format(version="version"),
            2,
            "needs a primary key or unique constraint on exactly its key columns (name)",
        ),
        (
            TABLE.format(table="items", key="id") + VERSION.format(version="name"),
            2,
            "version column name must be an integer column",
        ),
        (
            TABLE.replace("TOPIC", "no-such-topic").format(table="items", key="id")
            + VERSION.format(version="version"),
            2,
            "topic no-such-topic (mapped to items in",
        ),
        (
            TABLE.format(table="items", key="id") + 'version = { column = "version" }\n'
            "[tables.columns]\nname = 'name'\nname2 = 'qty'\n",
            2,
            "table items has no column name2",
        ),
    ],
)
def test_bad_mapping_fails_fast_with_one_clear_line(
    env: MirrorEnv, mirror_topic: str, mapping: str, code: int, message: str
) -> None:
    result = env.run("--once", **_mapping(env, mirror_topic, mapping))
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("relay: error: ")


@pytest.mark.parametrize(
    ("args", "extra", "code", "message"),
    [
        ([], {"RELAY_MIRROR_CONFIG": ""}, 2, "no mirror mapping: set RELAY_MIRROR_CONFIG"),
        ([], {"RELAY_MIRROR_CONFIG": "/nonexistent.toml"}, 2, "cannot read mirror mapping"),
        (["--topics", "other"], {}, 2, "topic other is not in the mapping"),
        (["--batch-size", "0"], {}, 2, "argument --batch-size: must be positive, got 0"),
        ([], {"RELAY_MIRROR_BATCH_SIZE": "0"}, 2, "RELAY_MIRROR_BATCH_SIZE must be positive"),
        (
            ["-X", "partition.assignment.strategy=range"],
            {},
            2,
            "'partition.assignment.strategy' is set by the mirror itself",
        ),
        (["-X", "isolation.level=read_uncommitted"], {}, 2, "is set by the relay itself"),
        (
            [],
            {"RELAY_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "RELAY_KAFKA_TIMEOUT_S": "2"},
            4,
            "no Kafka broker answered at 127.0.0.1:1",
        ),
    ],
)
def test_bad_settings_fail_fast_with_one_clear_line(
    env: MirrorEnv, args: list[str], extra: dict[str, str], code: int, message: str
) -> None:
    result = env.run("--once", *args, **extra)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_unmigrated_database_names_the_fix(env: MirrorEnv) -> None:
    run_sql(env.database_url, "UPDATE relay_alembic_version SET version_num = '0001_outbox'")
    result = env.run("--once")
    assert result.returncode == 3, result.stderr
    assert "run `relay db upgrade`" in result.stderr


def test_no_secret_in_the_output(env: MirrorEnv) -> None:
    run_sql(env.database_url, f"ALTER ROLE CURRENT_USER PASSWORD '{SECRET}'")
    url = sa.make_url(env.database_url).set(password=SECRET)
    ok = env.run(
        "--once",
        "-X",
        f"sasl.password={SECRET}",
        RELAY_DATABASE_URL=url.render_as_string(hide_password=False),
        log_level="DEBUG",
    )
    assert ok.returncode == 0, ok.stderr
    refused = env.run(
        "--once", RELAY_DATABASE_URL=url.set(port=1).render_as_string(hide_password=False)
    )
    assert refused.returncode == 3
    for output in (ok.stdout + ok.stderr, refused.stdout + refused.stderr):
        assert SECRET not in output


def test_a_stored_offset_past_the_end_of_the_partition_is_an_error(
    env: MirrorEnv, mirror_topic: str
) -> None:
    """The topic was recreated (or truncated) under the mirror: not silently 'done'."""
    env.sql(
        "INSERT INTO mirror_offsets (consumer_group, topic, partition, next_offset) "
        "VALUES (:g, :t, 0, 1000)",
        g=env.group,
        t=mirror_topic,
    )
    result = env.run("--once")
    assert result.returncode == 4, result.stderr
    assert "the stored offset 1000 is past the end of the partition (0)" in result.stderr
