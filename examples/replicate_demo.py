"""Replication demo: a topic on the first cluster, written with transactions (some of them
aborted), is copied to the second cluster by `relay replicate --once`; the target is then
compared, partition by partition, with the source's committed records.

    python examples/replicate_demo.py [--keep]  (RELAY_REPLICATE_SOURCE/TARGET_BOOTSTRAP_SERVERS,
                                                written by `relay dev up` into .relay-dev/env)

It deletes its topics (on both clusters) and the replicator's group when it ends (also on
an error or Ctrl-C), unless ``--keep`` (or RELAY_DEMO_KEEP=1) asks to keep them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

ROOT = Path(__file__).resolve().parents[1]
RUN_ID = uuid.uuid4().hex[:8]
TOPIC = f"demo.payments.{RUN_ID}"
PARTITIONS = 3
GROUP = f"demo-{RUN_ID}-replicate"  # the replicator's positions, on the target cluster
Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def write_source(bootstrap: str) -> tuple[int, int]:
    """20 transactions of 10 payment events; every 4th is aborted. Returns (committed,
    aborted) record counts."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"demo-payments-{RUN_ID}"}
    )
    producer.init_transactions(30)
    committed = aborted = 0
    for txn in range(20):
        producer.begin_transaction()
        for i in range(10):
            n = txn * 10 + i
            producer.produce(
                TOPIC,
                key=b"customer-%d" % (n % 7),
                value=b'{"payment": %d, "cents": %d}' % (n, 100 + n),
                headers=[("event-type", b"PaymentCaptured")],
            )
        if txn % 4 == 3:
            producer.flush(30)  # the aborted records reach the log (and are never copied)
            producer.abort_transaction(30)
            aborted += 10
        else:
            producer.commit_transaction(30)
            committed += 10
    return committed, aborted


def read_committed(bootstrap: str, topic: str) -> dict[int, list[Record]]:
    """Each partition's committed records, without the provenance headers."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-reader-{RUN_ID}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found: dict[int, list[Record]] = {}
    for p in range(PARTITIONS):
        consumer.assign([TopicPartition(topic, p, 0)])
        records: list[Record] = []
        while True:
            message = consumer.poll(10)
            if message is None:
                break
            err = message.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                break
            own = tuple(h for h in message.headers() or () if not h[0].startswith("relay-source"))
            records.append((message.key(), message.value(), own))
        found[p] = records
    consumer.close()
    return found


def first_copy_headers(bootstrap: str, topic: str) -> list[tuple[str, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-h-{RUN_ID}",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    message = consumer.poll(10)
    consumer.close()
    return list(message.headers() or ()) if message is not None else []


def keep_asked() -> bool:
    """``--keep`` or RELAY_DEMO_KEEP=1: leave the demo's topics and group behind."""
    return "--keep" in sys.argv[1:] or os.environ.get("RELAY_DEMO_KEEP", "") not in ("", "0")


def clean_up(source: str, target: str) -> None:
    """Delete the source topic, its copy and the replicator's group; each step on its
    own, so that one that fails does not keep the others."""
    gone = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.GROUP_ID_NOT_FOUND)
    source_admin = AdminClient({"bootstrap.servers": source})
    target_admin = AdminClient({"bootstrap.servers": target})
    for what, futures in (
        (f"topic {TOPIC}", source_admin.delete_topics([TOPIC], operation_timeout=30)),
        (f"topic dr.{TOPIC}", target_admin.delete_topics([f"dr.{TOPIC}"], operation_timeout=30)),
        (f"group {GROUP}", target_admin.delete_consumer_groups([GROUP])),
    ):
        for future in futures.values():
            try:
                future.result(30)
            except KafkaException as exc:
                if exc.args[0].code() not in gone:
                    print(f"could not delete {what}: {exc}", file=sys.stderr)
    print(f"cleaned up: topics {TOPIC} and dr.{TOPIC}, group {GROUP} (--keep keeps them)")


def main() -> int:
    source = os.environ.get("RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS")
    target = os.environ.get("RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS")
    if not source or not target:
        print("set RELAY_REPLICATE_SOURCE/TARGET_BOOTSTRAP_SERVERS (source .relay-dev/env)")
        return 2
    try:
        return run_demo(source, target)
    finally:  # also on an error or Ctrl-C
        if keep_asked():
            print(f"kept: topics {TOPIC} and dr.{TOPIC}, group {GROUP}")
        else:
            clean_up(source, target)


def run_demo(source: str, target: str) -> int:
    print(f"1. a producer writes {TOPIC} on the source cluster ({source}) in transactions")
    committed, aborted = write_source(source)
    print(f"   {committed} records committed, {aborted} in aborted transactions")
    command = [
        sys.executable, "-m", "relay.cli", "replicate", "--once",
        "--topics", TOPIC, "--target-prefix", "dr.", "--source-alias", "demo-east",
        "--group", GROUP,
    ]  # fmt: skip
    print(f"2. relay replicate --once --topics {TOPIC} --target-prefix dr.  (to {target})")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return done.returncode
    print("   " + done.stdout.strip().replace("\n", "\n   "))
    print("3. a read_committed consumer reads both sides, partition by partition:")
    ours, theirs = read_committed(source, TOPIC), read_committed(target, f"dr.{TOPIC}")
    print(f"   {'partition':>9} {'source':>7} {'target':>7}")
    for p in range(PARTITIONS):
        print(f"   {p:>9} {len(ours[p]):>7} {len(theirs[p]):>7}")
    print("4. the provenance headers of the first copy in partition 0:")
    for name, value in first_copy_headers(target, f"dr.{TOPIC}"):
        print(f"   {name}: {(value or b'').decode()}")
    same = ours == theirs
    print(
        f"dr.{TOPIC} "
        + ("equals the source's committed records" if same else "DIFFERS from the source")
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
