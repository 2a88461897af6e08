"""How often and how long to retry, passed into the cores rather than decided inside them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential back-off between attempts; ``max_attempts=None`` retries for ever."""

    initial_delay_s: float = 0.2
    max_delay_s: float = 10.0
    multiplier: float = 2.0
    max_attempts: int | None = 8

    def delay(self, attempt: int) -> float:
        """Delay before attempt number ``attempt`` + 1 (``attempt`` counts from 1)."""
        return min(self.max_delay_s, self.initial_delay_s * self.multiplier ** (attempt - 1))

    def gives_up_after(self, attempt: int) -> bool:
        return self.max_attempts is not None and attempt >= self.max_attempts
