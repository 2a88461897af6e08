"""The drain's hand-written peers, each run as a child process like `relay run --once`:

    python -m bench.forward_peers raw|naive      (BENCH_DATABASE_URL, BENCH_BOOTSTRAP)

``raw``: one transactional confluent-kafka producer over the same outbox rows, read in
(partition, id) order with a server-side cursor, one Kafka transaction per BATCH_SIZE
records, and nothing else: no position, no fencing check, no clean-up. The ceiling of
Python + librdkafka on this machine; not a relay (a crash re-sends everything).

``naive``: the at-least-once relay people write first: in a loop, ``SELECT ... ORDER BY id
FOR UPDATE SKIP LOCKED LIMIT n``, produce with an idempotent producer, flush, ``DELETE``
the rows, commit. A crash between the flush and the commit sends the batch again
(duplicates), and ``ORDER BY id`` skips a late committer, whose row is sent after rows
that committed after it (reordering).

Both produce the same records as the relay: key, value, the stored user headers plus
outbox-id, outbox-seq, outbox-partition and event-type, partitioner murmur2_random and
the relay's producer settings (linger.ms 20, batch.num.messages 10000, acks all).
"""

from __future__ import annotations

import base64
import os
import sys
import uuid
from collections.abc import Sequence

import psycopg
from confluent_kafka import Producer

from relay.devenv.databases import libpq_url

from .common import BATCH_SIZE

PRODUCER = {
    "linger.ms": 20,
    "batch.num.messages": 10000,
    "enable.idempotence": True,
    "acks": "all",
    "partitioner": "murmur2_random",
}
Header = tuple[str, str | bytes | None]


def _headers(
    row_id: int, partition: int, seq: int | None, event_type: str | None, stored: list[list[str]]
) -> list[Header]:
    headers: list[Header] = [(name, base64.b64decode(value)) for name, value in stored]
    headers += [
        ("outbox-id", str(row_id).encode()),
        ("outbox-seq", str(seq).encode()),
        ("outbox-partition", str(partition).encode()),
    ]
    if event_type is not None:
        headers.append(("event-type", event_type.encode()))
    return headers


# A row's relay partition: rows written since 0017_relay_drawn_positions carry none, so the
# key's, with the count in force, as the relay's draw gives it.
_PARTITION = (
    "coalesce(partition, CASE WHEN key IS NULL THEN mod(id, (SELECT partitions FROM "
    "outbox_settings))::integer ELSE outbox_partition_of(key, (SELECT partitions FROM "
    "outbox_settings)) END)"
)


def _produce(
    producer: Producer, topic: str, key: bytes | None, value: bytes | None, headers: list[Header]
) -> None:
    while True:
        try:
            producer.produce(topic, value, key, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


def raw(url: str, bootstrap: str) -> int:
    producer = Producer(
        {
            **PRODUCER,
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-raw-{uuid.uuid4().hex}",
        }
    )
    producer.init_transactions(30)
    sent = 0
    with psycopg.connect(libpq_url(url)) as conn, conn.cursor(name="backlog") as cur:
        cur.itersize = BATCH_SIZE
        cur.execute(
            f"SELECT id, {_PARTITION} AS p, coalesce(seq, id), topic, key, value, event_type, "
            "headers FROM outbox ORDER BY p, id"
        )
        in_txn = 0
        for row_id, partition, seq, topic, key, value, event_type, stored in cur:
            if in_txn == 0:
                producer.begin_transaction()
            _produce(
                producer, topic, key, value, _headers(row_id, partition, seq, event_type, stored)
            )
            in_txn += 1
            sent += 1
            if in_txn == BATCH_SIZE:
                producer.commit_transaction(60)
                in_txn = 0
        if in_txn:
            producer.commit_transaction(60)
    return sent


def naive(url: str, bootstrap: str) -> int:
    producer = Producer({**PRODUCER, "bootstrap.servers": bootstrap})
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    sent = 0
    with psycopg.connect(libpq_url(url)) as conn:
        while True:
            with conn.transaction():
                rows = conn.execute(
                    f"SELECT id, {_PARTITION}, coalesce(seq, id), topic, key, value, "
                    "event_type, headers FROM outbox ORDER BY id FOR UPDATE SKIP LOCKED LIMIT %s",
                    (BATCH_SIZE,),
                ).fetchall()
                if not rows:
                    break
                for row_id, partition, seq, topic, key, value, event_type, stored in rows:
                    headers = _headers(row_id, partition, seq, event_type, stored)
                    while True:
                        try:
                            producer.produce(
                                topic, value, key, headers=headers, on_delivery=on_delivery
                            )
                            break
                        except BufferError:
                            producer.poll(0.05)
                if producer.flush(60) or failures:
                    raise RuntimeError(f"naive relay: delivery failed: {failures[:3]}")
                conn.execute("DELETE FROM outbox WHERE id = ANY(%s)", ([r[0] for r in rows],))
                sent += len(rows)
    return sent


def main(argv: Sequence[str]) -> int:
    peers = {"raw": raw, "naive": naive}
    if len(argv) != 1 or argv[0] not in peers:
        print(__doc__, file=sys.stderr)
        return 2
    sent = peers[argv[0]](os.environ["BENCH_DATABASE_URL"], os.environ["BENCH_BOOTSTRAP"])
    print(f"{argv[0]}: sent {sent} records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
