"""The development servers' working directory: where it is, their ports, their
recorded state, and the lock that serialises ``up`` and ``down``."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from relay.errors import DevEnvError

log = logging.getLogger("relay.devenv")

LOOPBACK = "127.0.0.1"
DEFAULT_DIRNAME = ".relay-dev"
DEFAULT_TIMEOUT = 90.0

ENV_DIR = "RELAY_DEV_DIR"
ENV_PG_PORT = "RELAY_DEV_PG_PORT"
ENV_KAFKA_PORT = "RELAY_DEV_KAFKA_PORT"
ENV_CONTROLLER_PORT = "RELAY_DEV_KAFKA_CONTROLLER_PORT"
ENV_KAFKA_SASL_PORT = "RELAY_DEV_KAFKA_SASL_PORT"
ENV_TARGET_KAFKA_PORT = "RELAY_DEV_TARGET_KAFKA_PORT"
ENV_TARGET_CONTROLLER_PORT = "RELAY_DEV_TARGET_KAFKA_CONTROLLER_PORT"

DEFAULT_PG_PORT = 55432
DEFAULT_KAFKA_PORT = 59092
DEFAULT_CONTROLLER_PORT = 59093
DEFAULT_KAFKA_SASL_PORT = 59094
DEFAULT_TARGET_KAFKA_PORT = 59192
DEFAULT_TARGET_CONTROLLER_PORT = 59193


def env_workdir() -> Path | None:
    """``$RELAY_DEV_DIR`` as given (None when unset or empty)."""
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else None


def resolve_workdir(workdir: Path | str | None = None) -> Path:
    """Absolute path of the working directory: the argument, else ``$RELAY_DEV_DIR``,
    else ``.relay-dev`` under the current directory."""
    if workdir is None:
        workdir = env_workdir() or Path.cwd() / DEFAULT_DIRNAME
    return Path(workdir).expanduser().absolute()


@dataclass(frozen=True, slots=True)
class Ports:
    """Loopback TCP ports of the development servers."""

    postgres: int
    kafka: int
    kafka_controller: int
    kafka_sasl: int | None = DEFAULT_KAFKA_SASL_PORT
    """The broker's SASL_PLAINTEXT (PLAIN mechanism) listener; None: the broker has none."""
    target_kafka: int = DEFAULT_TARGET_KAFKA_PORT
    """Client (PLAINTEXT) listener of the broker of the second, independent Kafka cluster."""
    target_kafka_controller: int = DEFAULT_TARGET_CONTROLLER_PORT
    """KRaft controller listener of that broker."""

    def target_broker(self) -> Ports:
        """The second cluster's broker as ``start_kafka`` takes its ports: ``target_kafka``
        and ``target_kafka_controller`` as its listeners, and no SASL listener."""
        return replace(
            self,
            kafka=self.target_kafka,
            kafka_controller=self.target_kafka_controller,
            kafka_sasl=None,
        )


def _env_port(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        raise DevEnvError(f"{name}={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise DevEnvError(f"{name}={port} is out of the TCP port range")
    return port


def configured_ports() -> Ports:
    """Ports requested by the environment (``RELAY_DEV_*_PORT``) or the defaults."""
    ports = Ports(
        postgres=_env_port(ENV_PG_PORT, DEFAULT_PG_PORT),
        kafka=_env_port(ENV_KAFKA_PORT, DEFAULT_KAFKA_PORT),
        kafka_controller=_env_port(ENV_CONTROLLER_PORT, DEFAULT_CONTROLLER_PORT),
        kafka_sasl=_env_port(ENV_KAFKA_SASL_PORT, DEFAULT_KAFKA_SASL_PORT),
        target_kafka=_env_port(ENV_TARGET_KAFKA_PORT, DEFAULT_TARGET_KAFKA_PORT),
        target_kafka_controller=_env_port(
            ENV_TARGET_CONTROLLER_PORT, DEFAULT_TARGET_CONTROLLER_PORT
        ),
    )
    wanted = (
        ports.postgres,
        ports.kafka,
        ports.kafka_controller,
        ports.kafka_sasl,
        ports.target_kafka,
        ports.target_kafka_controller,
    )
    if len(set(wanted)) != len(wanted):
        raise DevEnvError(f"the development servers need {len(wanted)} distinct ports, got {ports}")
    return ports


def _state_file(workdir: Path) -> Path:
    return workdir / "state.json"


def read_state(workdir: Path) -> dict[str, int]:
    """Ports the servers in ``workdir`` were last started with (empty if never)."""
    try:
        raw = json.loads(_state_file(workdir).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, int)}


def write_state(workdir: Path, **values: int) -> None:
    state = read_state(workdir)
    state.update(values)
    tmp = _state_file(workdir).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(_state_file(workdir))


# --- locking -------------------------------------------------------------------------------

_lock_guard = threading.RLock()
_held: dict[Path, tuple[IO[bytes], int]] = {}


@contextmanager
def workdir_lock(workdir: Path) -> Iterator[None]:
    """Exclusive, re-entrant (within this process) lock on ``workdir``, so that concurrent
    ``up``/``down`` calls from several processes (e.g. pytest-xdist workers) serialize."""
    workdir.mkdir(parents=True, exist_ok=True)
    with _lock_guard:
        held = _held.get(workdir)
        if held is None:
            fh: IO[bytes] = (workdir / ".lock").open("ab")
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            _held[workdir] = (fh, 1)
        else:
            _held[workdir] = (held[0], held[1] + 1)
        try:
            yield
        finally:
            fh, depth = _held[workdir]
            if depth == 1:
                del _held[workdir]
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
                fh.close()
            else:
                _held[workdir] = (fh, depth - 1)
