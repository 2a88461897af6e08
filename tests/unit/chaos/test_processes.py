"""Signals of `relay chaos` reach only its own processes, also once their pids are free."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from relay.chaos.process_tree import identified, kill_identified
from relay.chaos.processes import Command, ManagedProcess


def test_a_pid_given_to_another_process_is_not_killed() -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        [(pid, started)] = identified([stranger.pid])
        sent: list[tuple[int, int]] = []

        def kill(target: int, sig: int) -> None:
            sent.append((target, sig))

        kill_identified([(pid, str(int(started) - 1))], kill)  # noted of an earlier process
        assert sent == []
        kill_identified([(pid, started)], kill)  # the process noted
        assert sent == [(pid, signal.SIGKILL)]
    finally:
        stranger.kill()
        stranger.wait()


def test_a_process_waited_for_is_sent_nothing(tmp_path: Path) -> None:
    """Once waited for, a process's pid (its group's id) may be another process's: its
    group is not signalled, even while the group still has a member (here a child left
    behind, which the group's id still names)."""
    leader = (
        "import subprocess, sys;"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        "print(child.pid, flush=True)"
    )
    log = tmp_path / "log"
    done = ManagedProcess("done", Command([sys.executable, "-c", leader], {}, tmp_path), log)
    assert done.wait(30) == 0
    child = int(log.read_text().split()[0])
    try:
        assert os.getpgid(child) == done.pid  # the group lives on
        assert done.signal_group(signal.SIGCONT) is False
    finally:
        os.kill(child, signal.SIGKILL)
