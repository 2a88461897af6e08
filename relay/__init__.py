"""Exactly-once transactional outbox relay between PostgreSQL and Kafka.

Services call :func:`publish` inside their own database transaction; ``relay run`` (or
the Spark job ``jobs/outbox_relay.py``) publishes committed events to Kafka exactly once.
"""

from relay.errors import RelayError
from relay.outbox import Event, InvalidEventError, publish, publish_many

__all__ = ["Event", "InvalidEventError", "RelayError", "publish", "publish_many"]
__version__ = "0.1.0"
