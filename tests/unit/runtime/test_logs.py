"""--log-format: text lines as before, or one JSON object a line with timestamp, level,
logger, message and the record's fields; secrets masked in both."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from relay.cli import main
from relay.errors import ConfigurationError
from relay.runtime import logs
from relay.spark import job_main

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


def test_with_json_logs_the_final_error_line_is_json_too(
    stderr: Stderr, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every line on stderr parses as JSON: the one-line error that ends a command too,
    with its exit code and error type as fields, the password masked."""
    for name in ("RELAY_DATABASE_URL", "RELAY_KAFKA_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(name, raising=False)
    code = main(["--log-format", "json", "run", "--once", "--kafka-bootstrap-servers", "k:9"])
    assert code == 2
    (line,) = [json.loads(text) for text in stderr.getvalue().splitlines()]
    assert line["level"] == "error"
    assert line["message"].startswith("relay: error: no database: set RELAY_DATABASE_URL")
    assert (line["exit_code"], line["error"]) == (2, "ConfigurationError")
    assert "exception" not in line


def test_with_json_logs_a_traceback_is_a_field_of_the_error_line(
    stderr: Stderr, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAY_DATABASE_URL", "postgresql+psycopg://u:hunter2@127.0.0.1:1/x")
    monkeypatch.setenv("RELAY_KAFKA_BOOTSTRAP_SERVERS", "k:9")
    monkeypatch.setenv("RELAY_BATCH_SIZE", "0")  # refused when the settings are read
    assert main(["run", "--once", "--log-format", "json", "--traceback"]) == 2
    (line,) = [json.loads(text) for text in stderr.getvalue().splitlines()]
    assert line["message"] == "relay: error: RELAY_BATCH_SIZE must be positive, got 0"
    assert "Traceback (most recent call last)" in line["exception"]
    assert "ConfigurationError: RELAY_BATCH_SIZE must be positive" in line["exception"]
    assert "hunter2" not in stderr.getvalue()


def test_a_spark_drivers_error_line_is_json_with_json_logs(stderr: Stderr) -> None:
    def run(_args: object) -> int:
        raise ConfigurationError("no topic for postgresql://u:hunter2@db/x")

    assert job_main("outbox_relay", None, lambda _p: None, run, ["--log-format", "json"]) == 2
    (line,) = [json.loads(text) for text in stderr.getvalue().splitlines()]
    assert line["message"] == "outbox_relay: error: no topic for postgresql://u:***@db/x"
    assert (line["level"], line["exit_code"]) == ("error", 2)
