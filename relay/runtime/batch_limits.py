"""How much one Kafka transaction carries (a relay partition's, or a replicated partition's).

A batch is bounded by records (``RELAY_BATCH_SIZE``) and by the bytes of its keys and values
(``RELAY_BATCH_BYTES``), so that it commits well inside ``transaction.timeout.ms``. When
a transaction outlasts that timeout anyway (a slow broker, rows larger than expected),
the broker aborts it and bumps the producer's epoch; the producer cannot tell that from
another instance taking the partition over. The relay can: a transaction the broker
aborted for its age was open at least that long, because the broker starts counting
after the relay began it. So a fence that comes after ``transaction.timeout.ms`` is read
as a timeout: the limits are halved below what the failed batch carried, and doubled
back, up to the configured ones, after each batch that commits in under a quarter of
the timeout. A fence that comes earlier is another instance, for certain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol, TypeVar

from relay.errors import ProducerFencedError, TransactionTimedOutError

# A batch that commits within this share of transaction.timeout.ms lets the limits grow.
_QUICK_SHARE = 0.25


class Payload(Protocol):
    """A record as a batch's byte bound sees it."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


R = TypeVar("R", bound=Payload)


def payload_bytes(record: Payload) -> int:
    """The bytes of ``record`` that a batch's byte bound counts: its key and value."""
    return len(record.key or b"") + len(record.value or b"")


def _total_bytes(records: Sequence[Payload]) -> int:
    """``sum(map(payload_bytes, records))``, iterated in C (once per batch, per record)."""
    keys = sum(map(len, filter(None, map(attrgetter("key"), records))))
    return keys + sum(map(len, filter(None, map(attrgetter("value"), records))))


@dataclass(slots=True)
class BatchLimits:
    """The current record and byte bounds of one partition's batches."""

    max_rows: int
    max_bytes: int
    transaction_timeout_s: float | None = None  # None: never read a fence as a timeout
    rows: int = field(init=False)
    bytes: int = field(init=False)

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.max_bytes < 1:
            raise ValueError("batch limits must be positive")
        self.rows = self.max_rows
        self.bytes = self.max_bytes

    def take(self, records: Sequence[R]) -> Sequence[R]:
        """The leading ``records`` within the row and byte bounds (at least one)."""
        records = records[: self.rows]
        if _total_bytes(records) <= self.bytes:  # the common case, without a Python loop
            return records
        total = 0
        for count, record in enumerate(records):
            total += payload_bytes(record)
            if total > self.bytes and count > 0:
                return records[:count]
        return records

    def timed_out(self, open_s: float, records: Sequence[Payload]) -> bool:
        """Whether a fence after the transaction of ``records`` was open ``open_s`` seconds
        is the broker's transaction timeout; if so, shrink below what it carried."""
        if self.transaction_timeout_s is None or open_s < self.transaction_timeout_s:
            return False
        self.rows = max(1, min(self.rows, len(records)) // 2)
        self.bytes = max(1, min(self.bytes, _total_bytes(records)) // 2)
        return True

    def committed(self, open_s: float) -> None:
        """A transaction committed after ``open_s`` seconds: grow back when it was quick."""
        if self.transaction_timeout_s is None:
            return
        if open_s < self.transaction_timeout_s * _QUICK_SHARE:
            self.rows = min(self.max_rows, self.rows * 2)
            self.bytes = min(self.max_bytes, self.bytes * 2)

    def fence_error(
        self,
        exc: ProducerFencedError,
        open_s: float,
        records: Sequence[Payload],
        *,
        where: str,
        transaction: str,
        units: str,
        taker: str,
    ) -> TransactionTimedOutError | ProducerFencedError:
        """What a fence during the transaction of ``records``, open ``open_s`` seconds,
        means: the broker's transaction timeout (the limits shrink: retry smaller), or
        ``taker``, another instance that took the partition over (stop)."""
        if self.timed_out(open_s, records):
            return TransactionTimedOutError(
                f"{where}: the {transaction} was open {open_s:.1f} s, as long as "
                "transaction.timeout.ms or longer, and the broker aborted it; next batches "
                f"carry at most {self.rows} {units} and {self.bytes} bytes"
            )
        return ProducerFencedError(
            f"{where}: fenced {open_s:.1f} s into a transaction, before "
            f"transaction.timeout.ms: {taker}; this instance stops",
            code=exc.code,
        )
