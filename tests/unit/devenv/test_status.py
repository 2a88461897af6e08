"""`relay dev status` run where no servers were started: it says so, and tells servers of
another working directory (something listens on the port) from stopped ones."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay import devenv
from relay.devenv.ports import free_ports
from relay.devenv.workdir import (
    ENV_CONTROLLER_PORT,
    ENV_KAFKA_PORT,
    ENV_KAFKA_SASL_PORT,
    ENV_PG_PORT,
    ENV_TARGET_CONTROLLER_PORT,
    ENV_TARGET_KAFKA_PORT,
    LOOPBACK,
)


@pytest.fixture
def listening() -> Iterator[int]:
    """A loopback port something listens on (as another checkout's PostgreSQL would)."""
    with socket.socket() as server:
        server.bind((LOOPBACK, 0))
        server.listen()
        yield server.getsockname()[1]


def test_status_outside_the_checkout_tells_busy_ports_from_stopped_servers(
    tmp_path: Path, listening: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = (
        ENV_KAFKA_PORT,
        ENV_CONTROLLER_PORT,
        ENV_KAFKA_SASL_PORT,
        ENV_TARGET_KAFKA_PORT,
        ENV_TARGET_CONTROLLER_PORT,
    )
    for name, port in zip(names, free_ports(len(names)), strict=True):
        monkeypatch.setenv(name, str(port))
    monkeypatch.setenv(ENV_PG_PORT, str(listening))

    status = devenv.status(tmp_path / "elsewhere")
    text = devenv.describe(status)

    assert status.postgres.pid is None and status.postgres.port_in_use
    assert not status.kafka.port_in_use
    lines = text.splitlines()
    assert lines[0] == f"workdir: {tmp_path / 'elsewhere'} (none here)"
    assert lines[1].endswith("not started from this workdir, but something listens on the port")
    assert lines[2].endswith("  stopped")
    assert "set RELAY_DEV_DIR" in lines[-1]
