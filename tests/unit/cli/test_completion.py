"""Shell completion (argcomplete): subcommands, flags and choices complete; `relay
completion SHELL` prints the script."""

from __future__ import annotations

import io

import argcomplete
import pytest

from relay.cli import build_parser, main
from relay.cli.completion import complete


class _Finder(argcomplete.CompletionFinder):
    def _init_debug_stream(self) -> None:
        """Not file descriptor 9, as argcomplete does by default: pytest may hold it."""
        argcomplete.io.debug_stream = io.StringIO()


def _completions(line: str, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """What the shell gets for ``line`` (the cursor at its end), the way argcomplete's
    shell script asks: environment in, words on the output stream, then exit."""
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    monkeypatch.setenv("_ARGCOMPLETE_IFS", "\n")
    monkeypatch.setenv("COMP_LINE", line)
    monkeypatch.setenv("COMP_POINT", str(len(line)))
    out = io.StringIO()
    exited: list[int] = []
    _Finder()(build_parser(), exit_method=exited.append, output_stream=out)
    assert exited == [0]
    return {word.strip() for word in out.getvalue().split("\n") if word.strip()}


def test_subcommands_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    found = _completions("relay ", monkeypatch)
    assert {"run", "mirror", "status", "dead-letters", "completion"} <= found


def test_flags_of_a_subcommand_complete_with_the_global_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = _completions("relay run --", monkeypatch)
    assert {"--once", "--batch-size", "--partitions", "--log-level", "--log-format"} <= found


def test_choices_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _completions("relay run --log-format ", monkeypatch) == {"text", "json"}
    assert {"bash", "zsh", "fish"} <= _completions("relay completion ", monkeypatch)
    assert _completions("relay run --log-level W", monkeypatch) == {"WARNING"}


def test_without_the_shell_asking_completion_does_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("_ARGCOMPLETE", raising=False)
    complete(build_parser())  # returns: no completion requested


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_script_names_relay(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "relay" in script
    assert "_ARGCOMPLETE" in script
