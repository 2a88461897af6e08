"""What the checkers read from a topic: the records a read_committed consumer saw."""

from __future__ import annotations

from dataclasses import dataclass

EXAMPLES = 5
"""How many examples of each kind of anomaly a report names."""

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """One record a read_committed consumer saw."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: int | None = None
