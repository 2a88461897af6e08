"""Exactly-once transactional outbox relay between PostgreSQL and Kafka.

Services call :func:`publish` (with asyncio, :func:`publish_async`) inside their own
database transaction; ``relay run`` (or the Spark job ``jobs/outbox_relay.py``) publishes
committed events to Kafka exactly once.
The package's plan is in ``docs/architecture.md``.
"""

from relay.errors import InvalidEventError, RelayError, UnsupportedBindError
from relay.postgres.outbox_writer import (
    publish,
    publish_async,
    publish_many,
    publish_many_async,
)
from relay.publishing.events import Event

__all__ = [
    "Event",
    "InvalidEventError",
    "RelayError",
    "UnsupportedBindError",
    "publish",
    "publish_async",
    "publish_many",
    "publish_many_async",
]
__version__ = "0.1.0"
