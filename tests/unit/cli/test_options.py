"""The command line's own options: one clear line and exit 2 for a bad one, never a
traceback; ``--version`` answers."""

from __future__ import annotations

import pytest

from relay import __version__
from relay.cli import main


def test_version_prints_the_version_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"relay {__version__}"


def test_an_unknown_log_level_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--log-level", "loud", "run"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'LOUD'" in err
    assert "Traceback" not in err


def test_log_levels_are_accepted_in_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--log-level", "debug", "run", "--help"])
    assert exited.value.code == 0
