"""Injecting the planned faults one at a time, within bounds, and logging each one.

Every fault is logged as one line (ISO timestamp, number, kind, what happened) and as
one JSON object per line in ``faults.jsonl``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

from relay.chaos import faults, replica_faults
from relay.chaos.faults import FaultContext, Outcome
from relay.chaos.names import FaultKind
from relay.errors import FaultSkipped


@dataclass(frozen=True, slots=True)
class FaultRecord:
    n: int | None  # the how-manieth injected fault; None when skipped
    of: int
    kind: str
    at: str
    injected: bool
    target: str
    detail: str
    seconds: float

    def line(self) -> str:
        head = f"fault {self.n}/{self.of}" if self.injected else "skipped"
        return f"{self.at} {head} {self.kind}: {self.target}; {self.detail} ({self.seconds:.1f} s)"


class FaultLog:
    def __init__(
        self, path: Path, emit: Callable[[str], None], now: Callable[[], datetime]
    ) -> None:
        self._file: TextIO = path.open("a", encoding="utf-8")
        self._emit = emit
        self.now = now
        self.records: list[FaultRecord] = []

    def add(self, record: FaultRecord) -> None:
        self.records.append(record)
        self._file.write(json.dumps(asdict(record)) + "\n")
        self._file.flush()
        self._emit(record.line())

    def close(self) -> None:
        self._file.close()


class FaultInjector:
    """Injects the planned faults one after another, with seeded gaps, within a time
    limit; each one is logged when it ends. A skipped fault (its target never came up)
    is tried again at the end of the plan, at most ``len(plan)`` retries in all, so that
    the planned count is injected whenever time allows."""

    def __init__(
        self,
        plan: Sequence[FaultKind],
        ctx: FaultContext,
        log: FaultLog,
        *,
        gap_s: tuple[float, float],
        deadline: float,
        stop: threading.Event | None = None,
    ) -> None:
        self._plan = plan
        self._ctx = ctx
        self._log = log
        self._gap = gap_s
        self._deadline = deadline
        self._stop = stop

    def run(self) -> None:
        clock = self._ctx.clock
        queue = list(self._plan)
        retries = len(queue)
        injected = 0
        while queue:
            kind = queue.pop(0)
            if clock.wait(self._ctx.rng.uniform(*self._gap), self._stop):
                return
            if clock.monotonic() >= self._deadline:  # no fault starts after the limit
                return
            at = self._log.now().isoformat(timespec="milliseconds")
            started = clock.monotonic()
            try:
                action = faults.ACTIONS.get(kind) or replica_faults.ACTIONS[kind]
                outcome = action(self._ctx)
            except FaultSkipped as exc:
                outcome = Outcome("-", str(exc))
                if retries > 0:
                    retries -= 1
                    queue.append(kind)
                n = None
            else:
                injected += 1
                n = injected
            self._log.add(
                FaultRecord(
                    n,
                    len(self._plan),
                    kind.value,
                    at,
                    n is not None,
                    outcome.target,
                    outcome.detail,
                    round(clock.monotonic() - started, 2),
                )
            )
