"""A producer of the chaos run writing straight to Kafka: transactions of records on the
ingest topic (a tenth aborted), which the replicator copies beside the outbox's topic.

The fault that deletes the topic and creates it again (relay.chaos.replica_faults) pauses
it between two transactions, and resumes it with the next *generation*: each record's
value names the generation it was written in, so that the checker can tell the copies of
the old topic from those of the new one (their source offsets both start at 0). The
writer never tracks what it committed: the topic as a read_committed consumer sees it is
the truth. It survives broker restarts by building its producer again.
"""

from __future__ import annotations

import json
import logging
import random
import threading

from confluent_kafka import KafkaException, Producer

from relay.runtime.clock import Clock

log = logging.getLogger(__name__)


def ingest_value(generation: int, n: int) -> bytes:
    """An ingest record's value: the generation it was written in (the checker reads it,
    relay.chaos.replica_checker.generation), and its number."""
    return json.dumps({"generation": generation, "n": n}).encode()


class IngestWriter:
    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        transactional_id: str,
        seed: int,
        clock: Clock,
    ) -> None:
        self.topic = topic
        self.generation = 0
        self._config = {
            "bootstrap.servers": bootstrap_servers,
            "transactional.id": transactional_id,  # a new producer fences the last one
            "transaction.timeout.ms": 10000,
        }
        self._rng = random.Random(f"ingest/{seed}")
        self._clock = clock
        self._stop = threading.Event()
        self._writing = threading.Event()
        self._writing.set()
        self._transaction = threading.Lock()  # held for each transaction
        self._thread: threading.Thread | None = None
        self._n = 0
        self.committed = self.aborted = self.failed = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-ingest", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def pause(self, timeout: float = 60.0) -> bool:
        """Stop writing once the transaction under way has ended; False when it did not
        end within ``timeout``."""
        self._writing.clear()
        if not self._transaction.acquire(timeout=timeout):
            return False
        self._transaction.release()
        return True

    def resume(self, generation: int) -> None:
        self.generation = generation
        self._writing.set()

    def describe(self) -> str:
        return (
            f"{self.committed} ingest transactions committed, {self.aborted} aborted, "
            f"{self.failed} failed, generation {self.generation}"
        )

    def _run(self) -> None:
        producer: Producer | None = None
        while not self._stop.is_set():
            with self._transaction:
                if self._writing.is_set():
                    try:
                        producer = producer or self._producer()
                        self._write(producer)
                    except KafkaException as exc:  # a broker restarting, the topic recreated
                        log.debug("ingest transaction failed: %s", exc)
                        self.failed += 1
                        producer = None
            self._clock.wait(self._rng.uniform(0.05, 0.15), self._stop)

    def _producer(self) -> Producer:
        producer = Producer(self._config)
        producer.init_transactions(15)
        return producer

    def _write(self, producer: Producer) -> None:
        producer.begin_transaction()
        for _ in range(self._rng.randint(1, 5)):
            n, self._n = self._n, self._n + 1
            producer.produce(
                self.topic,
                value=ingest_value(self.generation, n),
                key=b"k%d" % (n % 17),
                headers=[("ingest-n", b"%d" % n)],
            )
        if self._rng.random() < 0.1:
            producer.flush(15)  # the aborted records are in the log, not just dropped
            producer.abort_transaction(15)
            self.aborted += 1
        else:
            producer.commit_transaction(15)
            self.committed += 1
