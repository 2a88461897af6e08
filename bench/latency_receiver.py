"""The latency benchmark's read_committed consumer, in a process of its own.

Until 2026-11-28 it ran as a thread of the benchmark's process, beside the 8 writer
threads, and took its records with ``consume(1000, 0.05)``: that call returns only when
it has 1,000 messages or the 50 ms are up, so each record waited up to 50 ms more, and
the thread waited for the GIL the writers held (the mirrored row, committed by another
process, arrived before the record did, at p50). Now it takes a record as soon as it
comes, in a process of its own: it shares the cores, as the relay and the mirror do,
but not an interpreter."""

from __future__ import annotations

import json
import multiprocessing
import time
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

_CONTEXT = multiprocessing.get_context("spawn")  # no fork of librdkafka's threads


class Receiver:
    """From the topic's current end: receive time - ts per event ``n`` (its value's
    fields), and the commit markers (gaps in a partition's offsets) from event
    ``measure_from`` on."""

    def __init__(self, bootstrap: str, topic: str, group: str, measure_from: int, out: Path):
        self.ready = _CONTEXT.Event()
        self.stop = _CONTEXT.Event()
        self._received: Synchronized[int] = _CONTEXT.Value("q", 0)
        self._measured: Synchronized[int] = _CONTEXT.Value("q", 0)
        self._out = out
        self._process = _CONTEXT.Process(
            target=_receive,
            args=(bootstrap, topic, group, measure_from, out),
            kwargs={
                "ready": self.ready,
                "stop": self.stop,
                "received": self._received,
                "measured": self._measured,
            },
            daemon=True,
        )
        self.latencies: dict[int, float] = {}
        self.markers = 0

    def start(self) -> None:
        self._process.start()

    def received(self) -> int:
        return int(self._received.value)

    def measured(self) -> int:
        """Events received from ``measure_from`` on."""
        return int(self._measured.value)

    def finish(self) -> None:
        """Stop it, and read what it measured into :attr:`latencies` and :attr:`markers`."""
        self.stop.set()
        if self._process.pid is None:
            return  # never started
        self._process.join(60)
        if self._process.is_alive():
            self._process.kill()
            raise RuntimeError("the latency receiver did not stop")
        if self._out.exists():
            found = json.loads(self._out.read_text())
            self.latencies = {int(n): float(v) for n, v in found["latencies"].items()}
            self.markers = int(found["markers"])
            self._out.unlink()


def _receive(
    bootstrap: str, topic: str, group: str, measure_from: int, out: Path, **shared: Any
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    latencies: dict[int, float] = {}
    last: dict[int, int] = {}
    markers = 0
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in meta.partitions])
        shared["ready"].set()
        while not shared["stop"].is_set():
            # One message as soon as it comes, then what was fetched with it: consume(n, t)
            # waits for all n messages until t, and so added up to t to each latency.
            first = consumer.poll(0.05)
            if first is None:
                continue
            for message in [first, *consumer.consume(1000, 0)]:
                raw = message.value()
                if message.error() is not None or raw is None:
                    continue
                now = time.time()
                event = json.loads(raw)
                n = int(event["n"])
                latencies[n] = now - float(event["ts"])
                part, offset = message.partition() or 0, message.offset() or 0
                previous = last.get(part)
                if previous is not None and n >= measure_from:
                    markers += offset - previous - 1
                last[part] = offset
                shared["received"].value += 1
                if n >= measure_from:
                    shared["measured"].value += 1
    finally:
        consumer.close()
        out.write_text(json.dumps({"latencies": latencies, "markers": markers}))
