"""Small value types shared by the core and its adapters."""

from __future__ import annotations

from dataclasses import dataclass

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """One committed outbox row, as the relay publishes it."""

    id: int
    partition: int
    seq: int
    topic: str
    key: bytes | None
    value: bytes | None
    event_type: str | None
    headers: Headers


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What one Kafka transaction published for one relay partition."""

    partition: int
    records: int
    first_seq: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What a relay partition published during one run."""

    partition: int
    records: int
    batches: int
    position: int
