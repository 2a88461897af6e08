"""The consume loop over in-memory ports, as the loop's tests build it: batches applied
inline, or on the apply lane's own thread (``OVERLAP[0]``, set by each test module's
fixture)."""

from __future__ import annotations

import threading

from relay.mirroring.applier import Applier
from relay.mirroring.loop import MirrorLoop
from relay.mirroring.types import TopicPartitionKey
from relay.runtime.retry import RetryPolicy
from tests.fakes.mirroring import FakeStream, MemoryStore, items_table

OVERLAP = [False]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 0.001
        return self.now

    def wait(self, seconds: float, stop: threading.Event | None = None) -> bool:
        self.now += seconds
        return stop is not None and stop.is_set()


def make_loop(
    store: MemoryStore,
    targets: dict[TopicPartitionKey, int] | None,
    batch_size: int = 100,
    retry: RetryPolicy | None = None,
) -> MirrorLoop:
    return MirrorLoop(
        Applier([items_table()], store),
        store,
        batch_size=batch_size,
        max_wait_s=0.5,
        targets=targets,
        retry=retry or RetryPolicy(initial_delay_s=0.01),
        clock=FakeClock(),
        overlap=OVERLAP[0],
    )


def run_once(store: MemoryStore, stream: FakeStream, batch_size: int = 100) -> MirrorLoop:
    loop = make_loop(store, dict(stream.stable), batch_size)
    stream.assign(sorted(stream.stable), loop)
    loop.run(stream)
    return loop
