"""SASL/PLAIN end to end against the broker's SASL_PLAINTEXT listener, and I5 for Kafka
credentials: the password never shows in logs (even at DEBUG), errors or ``--help``."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from relay.devenv import SaslEndpoint
from tests.integration.support import (
    RelayTestEnv,
    assert_exactly_once_in_order,
    read_committed,
    run_relay,
)
from tests.integration.writes import write_events

SECRET = "Sasl-s3cr3t-Pa55word"
EVENTS = 300


def _x_flags(properties: dict[str, str]) -> list[str]:
    return [arg for name, value in properties.items() for arg in ("-X", f"{name}={value}")]


@pytest.fixture
def sasl_env(relay_env: RelayTestEnv, sasl_endpoint: SaslEndpoint) -> RelayTestEnv:
    """``relay_env`` whose relay talks to the SASL listener (credentials not included)."""
    return dataclasses.replace(relay_env, bootstrap_servers=sasl_endpoint.bootstrap_servers)


@pytest.mark.parametrize("how", ["-X", "RELAY_KAFKA_CONFIG_FILE", "RELAY_KAFKA_PROPERTIES"])
def test_relay_publishes_through_sasl_plain(
    how: str,
    sasl_env: RelayTestEnv,
    sasl_endpoint: SaslEndpoint,
    bootstrap_servers: str,
    topic: str,
    tmp_path: Path,
) -> None:
    properties = sasl_endpoint.properties()
    args: list[str] = []
    env: dict[str, str] = {}
    if how == "-X":
        args = _x_flags(properties)
    elif how == "RELAY_KAFKA_CONFIG_FILE":
        config = tmp_path / "client.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        env = {"RELAY_KAFKA_CONFIG_FILE": str(config)}
    else:
        env = {"RELAY_KAFKA_PROPERTIES": ";".join(f"{k}={v}" for k, v in properties.items())}
    expected = write_events(sasl_env.database_url, topic, EVENTS)

    result = run_relay(sasl_env, "--log-level", "DEBUG", "run", "--once", *args, **env)

    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"published {EVENTS} records" in output
    assert "security.protocol=SASL_PLAINTEXT" in output  # the settings are logged...
    assert "sasl.password=***" in output  # ...masked
    assert sasl_endpoint.password not in output
    # Read back through the PLAINTEXT listener of the same broker.
    assert_exactly_once_in_order(read_committed(bootstrap_servers, topic), expected)


LONG_KAFKA_TIMEOUT_S = 120


@pytest.mark.parametrize("log_level", ["INFO", "DEBUG"])
def test_wrong_password_fails_fast_with_one_clear_line(
    log_level: str, sasl_env: RelayTestEnv, sasl_endpoint: SaslEndpoint
) -> None:
    properties = {**sasl_endpoint.properties(), "sasl.password": SECRET}
    started = time.monotonic()
    result = run_relay(
        sasl_env,
        "--log-level",
        log_level,
        "run",
        "--once",
        *_x_flags(properties),
        RELAY_KAFKA_TIMEOUT_S=str(LONG_KAFKA_TIMEOUT_S),
    )
    elapsed = time.monotonic() - started

    output = result.stdout + result.stderr
    assert result.returncode == 4, output
    errors = [line for line in result.stderr.splitlines() if line.startswith("relay: error:")]
    assert errors == [
        f"relay: error: Kafka authentication failed at {sasl_endpoint.bootstrap_servers}: "
        "SASL authentication error: Authentication failed: Invalid username or password "
        "(check security.protocol, sasl.mechanism, sasl.username and sasl.password)"
    ], output
    assert "Traceback" not in output
    assert "%3|" not in output  # no raw librdkafka lines on stderr
    if log_level == "INFO":
        assert "SASL authentication error" not in output.replace(errors[0], "")
    assert SECRET not in output
    # The start-up check sees the refusal at once instead of waiting RELAY_KAFKA_TIMEOUT_S
    # (set long, so that a busy machine's slow start-up cannot be taken for the wait).
    assert elapsed < LONG_KAFKA_TIMEOUT_S / 2, f"took {elapsed:.1f} s"


# --- no secret in --help or in errors about the settings (no server needed) ---------------

_OFFLINE = RelayTestEnv(
    f"postgresql+psycopg://relay:{SECRET}@127.0.0.1:1/relay", "127.0.0.1:1", "it-offline"
)


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["db", "upgrade", "--help"]])
def test_help_never_shows_a_secret(args: list[str], tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(f"sasl.password={SECRET}\n")
    result = run_relay(
        _OFFLINE,
        *args,
        RELAY_KAFKA_PROPERTIES=f"sasl.username=relay;sasl.password={SECRET}",
        RELAY_KAFKA_CONFIG_FILE=str(config),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "usage: relay" in output
    assert SECRET not in output


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["-X", "sasl.password"], {}),
        (["-X", f"={SECRET}"], {}),
        (["-X", f"sasl.password:{SECRET}"], {}),
        (["-X", f"sasl.password {SECRET}"], {}),
        ([], {"RELAY_KAFKA_PROPERTIES": f"sasl.password:{SECRET}"}),
    ],
    ids=["no-value", "no-name", "colon", "space", "env-colon"],
)
def test_malformed_password_property_is_not_echoed(args: list[str], env: dict[str, str]) -> None:
    result = run_relay(_OFFLINE, "--log-level", "DEBUG", "run", "--once", *args, **env)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "expected a Kafka property as name=value" in result.stderr
    assert "Traceback" not in output
    assert SECRET not in output


def test_malformed_line_in_properties_file_is_not_echoed(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SASL_PLAINTEXT\n={SECRET}\n")
    result = run_relay(_OFFLINE, "run", "--once", RELAY_KAFKA_CONFIG_FILE=str(config))
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert f"{config}: expected a Kafka property as name=value" in result.stderr
    assert SECRET not in output
