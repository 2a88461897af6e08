"""Processes of the development servers: starting them detached, probing and stopping them,
and the error that carries their log's tail."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from relay.devenv.workdir import LOOPBACK
from relay.errors import DevEnvError
from relay.runtime.clock import wait_until

log = logging.getLogger("relay.devenv")

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
    return process_state(pid) not in ("Z", "X") or _threads_alive(pid)


def _threads_alive(pid: int) -> bool:
    """True if a thread of ``pid`` has not exited yet: a killed multi-threaded process (a
    JVM) shows its main thread as a zombie while the others still exit, holding its sockets."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields and fields[0] not in ("Z", "X"):
            return True
    return False


def process_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, ...), or
    None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()


def process_start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or
    None where it is gone: with the pid, what tells a process from a later one that was
    given the same pid (pid_max can be as low as 32768)."""
    fields = process_stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


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
