"""Shared plumbing for the local development servers: errors, paths, ports, locks, processes."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from relay.errors import RelayError
from relay.timing import wait_until

log = logging.getLogger("relay.devenv")

LOOPBACK = "127.0.0.1"
DEFAULT_DIRNAME = ".relay-dev"
DEFAULT_TIMEOUT = 90.0

ENV_DIR = "RELAY_DEV_DIR"
ENV_PG_PORT = "RELAY_DEV_PG_PORT"
ENV_KAFKA_PORT = "RELAY_DEV_KAFKA_PORT"
ENV_CONTROLLER_PORT = "RELAY_DEV_KAFKA_CONTROLLER_PORT"
ENV_KAFKA_SASL_PORT = "RELAY_DEV_KAFKA_SASL_PORT"

DEFAULT_PG_PORT = 55432
DEFAULT_KAFKA_PORT = 59092
DEFAULT_CONTROLLER_PORT = 59093
DEFAULT_KAFKA_SASL_PORT = 59094


class DevEnvError(RelayError, RuntimeError):
    """A development server could not be set up, started, reached or stopped.

    A RelayError, so that the CLI prints one line (exit code 1), not a traceback; still a
    RuntimeError for callers that catch that."""


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
    kafka_sasl: int = DEFAULT_KAFKA_SASL_PORT
    """The broker's SASL_PLAINTEXT (PLAIN mechanism) listener."""


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
    )
    if len({ports.postgres, ports.kafka, ports.kafka_controller, ports.kafka_sasl}) != 4:
        raise DevEnvError(f"the development servers need four distinct ports, got {ports}")
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


# --- processes -----------------------------------------------------------------------------

# Children started by this process; kept referenced so they can be reaped (no zombies that
# look alive to kill(pid, 0)) and so that Popen does not warn about them when collected.
_children: dict[int, subprocess.Popen[bytes]] = {}


def spawn_detached(
    argv: list[str], *, cwd: Path, output: Path, env: dict[str, str] | None = None
) -> int:
    """Start a long-running server in its own session with stdout/stderr appended to
    ``output``; returns its pid. The server outlives this Python process."""
    with output.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _children[proc.pid] = proc
    return proc.pid


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live (non-zombie) process."""
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _children[pid]
            return False
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_state(pid) not in ("Z", "X")


def process_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, ...), or
    None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` in /proc (R, S, T, Z, ...), or None where unknown."""
    fields = process_stat(pid)
    return fields[0] if fields else None


def process_cmdline(pid: int) -> str | None:
    """Command line of ``pid`` joined by spaces, or None where /proc is not available."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace")


def terminate(pid: int, *, hard: bool, timeout: float) -> None:
    """SIGTERM (or SIGKILL when ``hard``) ``pid`` and wait for it to exit; escalate to
    SIGKILL if it is still running after ``timeout`` seconds."""
    sig = signal.SIGKILL if hard else signal.SIGTERM
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    if wait_for(lambda: not pid_alive(pid), timeout):
        return
    log.warning("process %d did not exit within %.0fs of SIGTERM; sending SIGKILL", pid, timeout)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if not wait_for(lambda: not pid_alive(pid), 10.0):
        raise DevEnvError(f"process {pid} survived SIGKILL")


def read_pid(path: Path) -> int | None:
    try:
        first = path.read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


# --- waiting and diagnostics ----------------------------------------------------------------


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until it is true (returns True) or ``timeout`` expires (False)."""
    return wait_until(predicate, timeout, interval=interval)


def port_open(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, or a note that it does not exist."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc.strerror})"
    body = "\n".join(text.splitlines()[-lines:])
    return f"--- last lines of {path} ---\n{body}"


def failure(message: str, *logs: Path) -> DevEnvError:
    """A DevEnvError whose message carries the tail of each log file."""
    parts = [message, *(tail(p) for p in logs)]
    return DevEnvError("\n".join(parts))
