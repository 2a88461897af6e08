"""relay.chaos.processes.run_logged: the one way a chaos run (its drain, its operator
faults) runs a command to its end: output appended to a log, the exit code, or TIMED_OUT."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from relay.chaos.processes import TIMED_OUT, run_logged


def test_each_run_appends_its_output_and_returns_its_exit_code(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    say = [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); exit(3)"]
    assert run_logged(say, dict(os.environ), log, 30.0) == 3
    assert run_logged(say, dict(os.environ), log, 30.0) == 3
    assert log.read_text().split() == ["out", "err", "out", "err"]


def test_a_command_that_outlasts_its_timeout_is_killed(tmp_path: Path) -> None:
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    assert run_logged(hang, dict(os.environ), tmp_path / "run.log", 0.5) == TIMED_OUT
