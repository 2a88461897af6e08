"""The generation a process with --process-transactions commits its positions with."""

from __future__ import annotations

from confluent_kafka import Consumer

from relay.kafka.member_transactions import member_generation


def test_the_generation_is_read_from_librdkafkas_group_metadata() -> None:
    member = b"CGMDv2:" + (7).to_bytes(4, "little") + b"grp\x00member-1\x00\x01"
    assert member_generation(member) == 7
    assert member_generation(b"CGMDv2:" + (300).to_bytes(4, "little") + b"g\x00") == 300


def test_a_consumer_outside_the_group_has_no_generation() -> None:
    """Its metadata (member "", generation -1) would make the broker accept the positions
    as a plain commit, without any member check: the process refuses to commit with it."""
    consumer = Consumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1"})
    try:
        assert member_generation(consumer.consumer_group_metadata()) == -1
    finally:
        consumer.close()
    assert member_generation(b"") == -1
    assert member_generation(b"something else") == -1
