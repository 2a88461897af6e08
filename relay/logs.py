"""Logging set-up with a last line of defence against secrets in log records."""

from __future__ import annotations

import logging
import sys

from relay.secrets import mask_text


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


def configure(level: str = "INFO", secrets: tuple[str, ...] = ()) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("alembic").setLevel(max(root.level, logging.INFO))
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
