"""I5 for configuration: one clear message, a non-zero exit code, no secret in output."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from tests.integration.support import RelayTestEnv, run_relay

SECRET = "s3cr3t-Pa55word"


def _with_password(url: str, password: str) -> str:
    return make_url(url).set(password=password).render_as_string(hide_password=False)


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        (
            [],
            {"RELAY_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "RELAY_KAFKA_TIMEOUT_S": "3"},
            4,
            "no Kafka broker answered at 127.0.0.1:1 within 3 s",
        ),
        (["-X", "no.such.property=1"], {}, 2, 'No such configuration property: "no.such.property"'),
        (["-X", "transactional.id=mine"], {}, 2, "'transactional.id' is set by the relay itself"),
        (["-X", "sasl.password"], {}, 2, "expected a Kafka property as name=value"),
        (["--batch-size", "0"], {}, 2, "argument --batch-size: must be positive, got 0"),
        ([], {"RELAY_BATCH_SIZE": "0"}, 2, "RELAY_BATCH_SIZE must be positive, got 0"),
        (["--partitions", "9"], {}, 2, "relay partition 9 does not exist"),
        ([], {"RELAY_DATABASE_URL": "mysql://u:p@h/db"}, 2, "must point at PostgreSQL"),
        ([], {"RELAY_DATABASE_URL": ""}, 2, "no database: set RELAY_DATABASE_URL"),
    ],
)
def test_bad_settings_fail_fast_with_one_clear_line(
    relay_env: RelayTestEnv, args: list[str], env: dict[str, str], code: int, message: str
) -> None:
    result = run_relay(relay_env, "run", "--once", *args, **env)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_option_is_rejected(relay_env: RelayTestEnv) -> None:
    result = run_relay(relay_env, "run", "--frobnicate")
    assert result.returncode == 2
    assert "unrecognized arguments: --frobnicate" in result.stderr


def test_unreachable_database_masks_the_password(relay_env: RelayTestEnv) -> None:
    url = make_url(_with_password(relay_env.database_url, SECRET)).set(port=1)
    result = run_relay(
        relay_env,
        "--log-level",
        "DEBUG",
        "run",
        "--once",
        RELAY_DATABASE_URL=url.render_as_string(hide_password=False),
    )
    assert result.returncode == 3, result.stderr
    assert "cannot connect to PostgreSQL at postgresql+psycopg://" in result.stderr
    assert ":***@" in result.stderr
    assert SECRET not in result.stderr + result.stdout


def test_schema_not_migrated_names_the_fix(database_url: str, bootstrap_servers: str) -> None:
    env = RelayTestEnv(database_url, bootstrap_servers, "unmigrated")
    result = run_relay(env, "run", "--once")
    assert result.returncode == 3, result.stderr
    assert "run `relay db upgrade`" in result.stderr


def test_no_secret_in_logs_of_a_working_run(relay_env: RelayTestEnv) -> None:
    db_password = make_url(relay_env.database_url).password
    assert db_password
    result = run_relay(
        relay_env,
        "--log-level",
        "DEBUG",
        "run",
        "--once",
        "-X",
        f"sasl.password={SECRET}",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "published 0 records" in output
    assert "sasl.password=***" in output  # the settings are logged, masked
    assert SECRET not in output
    assert f":{db_password}@" not in output
