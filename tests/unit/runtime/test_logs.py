"""--log-format: text lines as before, or one JSON object a line with timestamp, level,
logger, message and the record's fields; secrets masked in both."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from relay.cli import main
from relay.runtime import logs

URL = "postgresql+psycopg://relay:hunter2@db:5432/app"


class Stderr:
    """What the configured handler writes: it writes to the sys.stderr of the moment,
    which capsys captures."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    def getvalue(self) -> str:
        return self._capsys.readouterr().err


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str]) -> Iterator[Stderr]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield Stderr(capsys)
    root.handlers[:], root.level = handlers, level


def test_json_lines_carry_the_fields_and_mask_secrets(stderr: Stderr) -> None:
    logs.configure("INFO", secrets=("s3cret",), log_format="json")
    log = logging.getLogger("relay.test")
    log.info("connecting to %s", URL, extra={"rows_done": 5, "note": "token s3cret"})
    log.debug("not shown")
    try:
        raise ValueError(f"cannot reach {URL}")
    except ValueError:
        log.exception("failed")

    first, second = (json.loads(line) for line in stderr.getvalue().splitlines())
    assert list(first)[:4] == ["timestamp", "level", "logger", "message"]
    assert first["timestamp"].endswith("Z")
    assert (first["level"], first["logger"]) == ("info", "relay.test")
    assert first["message"] == "connecting to postgresql+psycopg://relay:***@db:5432/app"
    assert (first["rows_done"], first["note"]) == (5, "token ***")
    assert second["level"] == "error"
    assert "ValueError: cannot reach postgresql+psycopg://relay:***@db" in second["exception"]
    assert "hunter2" not in stderr.getvalue()
    assert "s3cret" not in stderr.getvalue()


def test_text_lines_mask_secrets_too(stderr: Stderr) -> None:
    logs.configure("INFO", secrets=("s3cret",), log_format="text")
    logging.getLogger("relay.test").warning("connecting to %s with s3cret", URL)
    line = stderr.getvalue()
    assert " WARNING relay.test: connecting to postgresql+psycopg://relay:***@db" in line
    assert line.rstrip().endswith("with ***")
    assert "hunter2" not in line


def test_alembic_says_what_it_migrates_not_how_it_connects(stderr: Stderr) -> None:
    """Every command checks the schema through Alembic; its two set-up lines (which dialect,
    transactional DDL) are noise at INFO, shown only at DEBUG. What it changes is shown."""
    migration = logging.getLogger("alembic.runtime.migration")
    logs.configure("INFO")
    migration.info("Context impl %s.", "PostgresqlImpl")
    migration.info("Will assume %s DDL.", "transactional")
    migration.info("Running upgrade %s -> %s, %s", "0008", "0009", "live partition count")
    (line,) = stderr.getvalue().splitlines()
    assert line.endswith("Running upgrade 0008 -> 0009, live partition count")
    logs.configure("DEBUG")
    migration.info("Will assume %s DDL.", "transactional")
    assert "Will assume transactional DDL." in stderr.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-format", "json", "--log-level", "debug", "completion", "bash"],
        ["completion", "bash", "--log-format", "JSON", "--log-level", "debug"],
    ],
)
def test_global_flags_before_and_after_the_subcommand(argv: list[str], stderr: Stderr) -> None:
    assert main(argv) == 0
    stderr.getvalue()  # the script on stdout
    logging.getLogger("relay.test").debug("shown at debug")
    (line,) = stderr.getvalue().splitlines()
    assert json.loads(line)["message"] == "shown at debug"


def test_a_flag_after_the_subcommand_wins_over_one_before(stderr: Stderr) -> None:
    assert main(["--log-format", "json", "completion", "bash", "--log-format", "text"]) == 0
    stderr.getvalue()
    logging.getLogger("relay.test").info("plain")
    assert stderr.getvalue().rstrip().endswith("INFO relay.test: plain")


def test_the_environment_sets_the_global_flags(
    stderr: Stderr, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAY_LOG_FORMAT", "json")
    monkeypatch.setenv("RELAY_LOG_LEVEL", "warning")
    assert main(["completion", "bash"]) == 0
    stderr.getvalue()
    logging.getLogger("relay.test").info("hidden")
    logging.getLogger("relay.test").warning("shown")
    (line,) = stderr.getvalue().splitlines()
    assert json.loads(line)["message"] == "shown"


def test_a_bad_variable_is_one_line_and_exit_2(
    stderr: Stderr, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAY_LOG_FORMAT", "xml")
    assert main(["completion", "bash"]) == 2
    assert (
        stderr.getvalue() == "relay: error: RELAY_LOG_FORMAT must be one of text, json, got 'xml'\n"
    )
