"""The mirror's hand-written peer, run as a child process like `relay mirror --once`:

    python -m bench.mirror_peers TOPIC     (BENCH_DATABASE_URL, BENCH_BOOTSTRAP)

A raw batched upsert: a read_committed consumer reads every partition of TOPIC from the
beginning to its end; every BATCH_SIZE records are COPYed into a temporary table and
applied with one ``INSERT ... SELECT DISTINCT ON (customer) ... ON CONFLICT DO UPDATE``
guarded by the version (the outbox-seq header), then committed. No stored offsets, no
dead letters, no compare-and-set: at-least-once, and a record it cannot decode stops it.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Sequence

import psycopg
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from relay.devenv.databases import libpq_url

from .common import BATCH_SIZE

APPLY = """
INSERT INTO bench_customers (customer, n, pad, source_seq)
SELECT DISTINCT ON (customer) customer, n, pad, source_seq FROM incoming
ORDER BY customer, source_seq DESC
ON CONFLICT (customer) DO UPDATE
SET n = EXCLUDED.n, pad = EXCLUDED.pad, source_seq = EXCLUDED.source_seq
WHERE bench_customers.source_seq < EXCLUDED.source_seq
"""


def _row(message: Message) -> tuple[str, int, str, int]:
    key, raw = message.key(), message.value()
    if key is None or raw is None:
        raise ValueError(f"record without key or value at offset {message.offset()}")
    value = json.loads(raw)
    seq = dict(message.headers() or [])["outbox-seq"]
    if seq is None:
        raise ValueError(f"record without outbox-seq at offset {message.offset()}")
    return key.decode(), int(value["n"]), str(value["pad"]), int(seq)


def _apply(
    conn: psycopg.Connection[tuple[object, ...]], rows: list[tuple[str, int, str, int]]
) -> None:
    with conn.transaction():
        conn.execute(
            "CREATE TEMP TABLE incoming (customer text, n bigint, pad text, source_seq bigint) "
            "ON COMMIT DROP"
        )
        with conn.cursor().copy("COPY incoming FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.execute(APPLY)


def upsert(url: str, bootstrap: str, topic: str) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-upsert-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    applied = 0
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        pending = set(meta.partitions)
        batch: list[tuple[str, int, str, int]] = []
        with psycopg.connect(libpq_url(url)) as conn:
            while pending:
                for message in consumer.consume(BATCH_SIZE, 1.0):
                    error = message.error()
                    if error is None:
                        batch.append(_row(message))
                    elif error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(int(message.partition() or 0))
                    else:
                        raise RuntimeError(str(error))
                if len(batch) >= BATCH_SIZE or (batch and not pending):
                    _apply(conn, batch)
                    applied += len(batch)
                    batch = []
    finally:
        consumer.close()
    return applied


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    applied = upsert(os.environ["BENCH_DATABASE_URL"], os.environ["BENCH_BOOTSTRAP"], argv[0])
    print(f"raw upsert: applied {applied} records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
