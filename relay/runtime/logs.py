"""Logging set-up with a last line of defence against secrets in log records.

Everything logs through the standard library (``logging.getLogger(__name__)``); this
module only chooses how records look on stderr: ``text`` (one line, ``time LEVEL logger:
message``) or ``json`` (one JSON object a line, rendered by structlog's
``ProcessorFormatter``: ``timestamp``, ``level``, ``logger``, ``message`` and the record's
``extra`` fields). Both pass through the same filters, so URL passwords and the given
secret values are masked in either; in JSON every string field is masked as well.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

from relay.runtime.secrets import mask_text

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")  # what --log-level accepts
FORMATS = ("text", "json")  # what --log-format accepts
LIBRDKAFKA_LOGGER = "relay.librdkafka"  # where the Kafka clients log librdkafka's lines
_DIGITS = re.compile(r"\d+")
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RedactingFilter(logging.Filter):
    """Masks URL passwords and known secret values in every record it sees."""

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_text(message, self._secrets)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class RepeatFilter(logging.Filter):
    """Lets one of each repeated librdkafka line through per ``interval`` seconds.

    While a broker is down every client logs each reconnect attempt; one line per
    interval, with how many were held back, says the same."""

    def __init__(self, interval: float = 10.0) -> None:
        super().__init__()
        self._interval = interval
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(LIBRDKAFKA_LOGGER):
            return True
        shape = _DIGITS.sub("#", record.getMessage())
        last = self._seen.get(shape)
        if last is not None and record.created - last[0] < self._interval:
            self._seen[shape] = (last[0], last[1] + 1)
            return False
        held_back = last[1] if last is not None else 0
        self._seen[shape] = (record.created, 0)
        if len(self._seen) > 1000:
            self._seen.clear()
        if held_back:
            record.msg, record.args = f"{record.getMessage()} (and {held_back} alike)", None
        return True


class _MaskFields:
    """A structlog processor: every string value of the event masked (``extra`` fields
    and exception text too, not only the message)."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._secrets = secrets

    def __call__(
        self, _logger: Any, _method: str, event: MutableMapping[str, Any]
    ) -> Mapping[str, Any]:
        for key, value in event.items():
            if isinstance(value, str):
                event[key] = mask_text(value, self._secrets)
        return event


_LEADING_KEYS = ("timestamp", "level", "logger", "message")


def _leading_keys_first(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> Mapping[str, Any]:
    """``timestamp``, ``level``, ``logger`` and ``message`` first, for people reading."""
    leading = {key: event.pop(key) for key in _LEADING_KEYS if key in event}
    return {**leading, **event}


def json_formatter(secrets: tuple[str, ...] = ()) -> logging.Formatter:
    """One JSON object a line: ``timestamp`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, the record's ``extra`` fields, and ``exception`` with a traceback."""
    import structlog  # here, not at start-up: the text format (the default) needs none of it

    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("message"),
            _leading_keys_first,
            _MaskFields(tuple(s for s in secrets if s)),
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
    )


def text_formatter() -> logging.Formatter:
    return logging.Formatter(_TEXT_FORMAT, "%Y-%m-%dT%H:%M:%S")


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time, so that a live progress display
    that takes stderr over (relay.runtime.progress) prints log lines above itself."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "INFO", secrets: tuple[str, ...] = (), log_format: str = "text") -> None:
    """Log records of ``level`` and above to stderr as ``log_format`` (``text``/``json``)."""
    handler = logging.StreamHandler(_CurrentStderr())
    handler.setFormatter(json_formatter(secrets) if log_format == "json" else text_formatter())
    handler.addFilter(RepeatFilter())
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("alembic").setLevel(max(root.level, logging.INFO))
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    migration = logging.getLogger("alembic.runtime.migration")
    migration.removeFilter(_ALEMBIC_SET_UP)
    if root.level > logging.DEBUG:
        migration.addFilter(_ALEMBIC_SET_UP)


class AlembicSetUpFilter(logging.Filter):
    """Drops the two lines Alembic logs each time it opens a migration context (``Context
    impl PostgresqlImpl.``, ``Will assume transactional DDL.``): every command checks the
    schema, so they would start every command's output. What it migrates stays."""

    SET_UP = ("Context impl ", "Will assume ")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.SET_UP))


_ALEMBIC_SET_UP = AlembicSetUpFilter()


def log_error(
    line: str, exc: BaseException, exit_code: int, *, traceback: bool, logger: str = "relay"
) -> None:
    """The error ``line`` that ends a command (``relay: error: ...``), through the
    configured handler: with ``--log-format json`` an object like every other line, with
    the fields ``error`` (the exception's type) and ``exit_code``, and ``exception`` (the
    stack) with ``traceback``. Masked like every record."""
    logging.getLogger(logger).error(
        "%s",
        mask_text(line),
        exc_info=exc if traceback else None,
        extra={"error": type(exc).__name__, "exit_code": exit_code},
    )
