"""The ``relay`` command as a child process, the way a user or a scheduler runs it: for the
tests of the CLI itself, of crashes and signals, and for benchmarks and chaos runs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def relay_command(*args: str) -> list[str]:
    """The argv of ``relay <args>`` with this interpreter."""
    return [sys.executable, "-m", "relay.cli", *args]


def run_relay(
    args: tuple[str, ...] | list[str],
    env: Mapping[str, str],
    *,
    cwd: Path | None = None,
    timeout: float = 180.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``relay <args>`` to completion with ``env``; its exit code and output."""
    return run_python(relay_command(*args), env, cwd=cwd, timeout=timeout)


def run_python(
    argv: list[str], env: Mapping[str, str], *, cwd: Path | None = None, timeout: float = 180.0
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (e.g. this interpreter on a Spark job) to completion with ``env``."""
    return subprocess.run(
        argv,
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_relay(
    args: tuple[str, ...] | list[str],
    env: Mapping[str, str],
    *,
    cwd: Path | None = None,
    log: Path | None = None,
) -> subprocess.Popen[str]:
    """``relay <args>`` in the background. Without ``log`` its stdout and stderr are pipes,
    for a process read with ``communicate()``; a long-running one writes both to ``log``
    instead (a pipe nobody reads would fill up and block it)."""
    if log is None:
        return subprocess.Popen(
            relay_command(*args),
            env=dict(env),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    with log.open("w") as handle:
        return subprocess.Popen(
            relay_command(*args),
            env=dict(env),
            cwd=cwd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )
