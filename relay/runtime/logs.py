"""Logging set-up with a last line of defence against secrets in log records."""

from __future__ import annotations

import logging
import re
import sys

from relay.runtime.secrets import mask_text

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")  # what --log-level accepts
LIBRDKAFKA_LOGGER = "relay.librdkafka"  # where the Kafka clients log librdkafka's lines
_DIGITS = re.compile(r"\d+")


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


def configure(level: str = "INFO", secrets: tuple[str, ...] = ()) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
    handler.addFilter(RepeatFilter())
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("alembic").setLevel(max(root.level, logging.INFO))
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
