"""How often and how long to retry, passed into the cores rather than decided inside them.

Kept hand-written (a dozen lines) rather than taken from tenacity: the cores drive their
own loops, with stop events, observers and an injected clock, and ask only for the next
delay; a decorator-style retry library would own the loop instead.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential back-off between attempts, with jitter; ``max_attempts=None`` retries
    for ever.

    Each delay is drawn between ``(1 - jitter)`` times and the whole of the exponential
    delay, so that processes that failed together (a broker or database restart) do not
    all come back in the same instant. ``uniform`` draws from [0, 1); tests pass their own.
    """

    initial_delay_s: float = 0.2
    max_delay_s: float = 10.0
    multiplier: float = 2.0
    max_attempts: int | None = 8
    jitter: float = 0.25
    uniform: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within 0..1, got {self.jitter}")

    def delay(self, attempt: int) -> float:
        """Delay before attempt number ``attempt`` + 1 (``attempt`` counts from 1)."""
        full = min(self.max_delay_s, self.initial_delay_s * self.multiplier ** (attempt - 1))
        return full * (1.0 - self.jitter * self.uniform())

    def gives_up_after(self, attempt: int) -> bool:
        return self.max_attempts is not None and attempt >= self.max_attempts
