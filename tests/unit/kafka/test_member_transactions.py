"""One transaction per process and cycle (the default): the generation its
positions are committed with, and how the partitions' threads share a transaction (the
Kafka clients replaced by recorders)."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError

from relay.errors import ProducerFencedError, RetriableError
from relay.kafka import member_transactions
from relay.kafka.member_transactions import MemberTransactions, member_generation
from relay.settings.relay import load_settings


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


class _Producer:
    """What MemberTransactions asks of its producer, recorded."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        self.calls: list[str] = []

    def init_transactions(self, *_args: object) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, offsets: list[object], *_args: object) -> None:
        self.calls.append(f"offsets {len(offsets)}")

    def commit_transaction(self, *_args: object) -> None:
        self.calls.append("commit")

    def abort_transaction(self, *_args: object) -> None:
        self.calls.append("abort")


class _Membership:
    def __init__(self, *_args: object, **_kwargs: object) -> None:
        pass

    def group_metadata(self) -> bytes:
        return b"CGMDv2:" + (3).to_bytes(4, "little") + b"g\x00m\x00\x01"

    def poll(self, _timeout: float) -> None:
        pass


def _transactions(monkeypatch: pytest.MonkeyPatch) -> MemberTransactions:
    monkeypatch.setattr(member_transactions, "Producer", _Producer)
    monkeypatch.setattr(member_transactions, "KafkaMembership", _Membership)
    settings = load_settings(
        environ={
            "RELAY_DATABASE_URL": "postgresql+psycopg://u:p@db/x",
            "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
            "RELAY_TRANSACTIONAL_ID_PREFIX": "shop",
            "RELAY_POSITIONS_GROUP": "shop-positions",
        }
    )
    transactions = MemberTransactions(settings, 4, assigned=print, revoked=print)
    transactions.poll(0)
    return transactions


class _FencedAtCommit(_Producer):
    """The first producer built is fenced at its first commit, as a member that found this
    process gone from the group fences it (relay.kafka.departed_members)."""

    built = 0

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        type(self).built += 1
        self.fenced = type(self).built == 1

    def commit_transaction(self, *_args: object) -> None:
        if self.fenced:
            raise KafkaException(LibKafkaError(LibKafkaError._FENCED, "fenced", fatal=True))
        super().commit_transaction()

    def purge(self) -> None:
        self.calls.append("purge")


@pytest.mark.parametrize("member_id", [None, "m1"], ids=["random name", "--member-id"])
def test_a_process_fenced_by_a_member_that_found_it_gone_goes_on_with_a_new_producer(
    monkeypatch: pytest.MonkeyPatch, member_id: str | None
) -> None:
    """Without --member-id only a departed-member check fences the process: its
    transaction is lost (retried), and the next one runs on a new producer. Under its
    --member-id another process has its name: the fence stands (the process stops)."""
    monkeypatch.setattr(_FencedAtCommit, "built", 0)
    monkeypatch.setattr(member_transactions, "Producer", _FencedAtCommit)
    monkeypatch.setattr(member_transactions, "KafkaMembership", _Membership)
    environ = {
        "RELAY_DATABASE_URL": "postgresql+psycopg://u:p@db/x",
        "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
        "RELAY_TRANSACTIONAL_ID_PREFIX": "shop",
        "RELAY_POSITIONS_GROUP": "shop-positions",
    }
    if member_id:
        environ["RELAY_MEMBER_ID"] = member_id
    settings = load_settings(environ=environ)
    transactions = MemberTransactions(settings, 4, assigned=print, revoked=print)
    transactions.poll(0)
    first = transactions.producer
    transactions.begin(0)
    outcome = transactions.finish(0, TopicPartition("positions", 0, 5))
    if member_id:
        assert isinstance(outcome, ProducerFencedError)
        return
    assert isinstance(outcome, RetriableError) and not isinstance(outcome, ProducerFencedError)
    transactions.begin(0)
    assert transactions.producer is not first
    assert transactions.finish(0, TopicPartition("positions", 0, 5)) is None
    assert isinstance(transactions.producer, _Producer)
    assert transactions.producer.calls == ["init", "begin", "offsets 1", "commit"]


class _SlowCommit(_Producer):
    """A commit that lasts until the test lets it end."""

    committing = threading.Event()
    release = threading.Event()

    def commit_transaction(self, *_args: object) -> None:
        type(self).committing.set()
        type(self).release.wait(10)
        super().commit_transaction()


def test_the_groups_poll_goes_on_while_the_brokers_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The commit's round trips to the brokers hold neither the shared transaction's lock
    nor the group metadata's: the polling thread (heartbeats, rebalances) goes on."""
    monkeypatch.setattr(_SlowCommit, "committing", threading.Event())
    monkeypatch.setattr(_SlowCommit, "release", threading.Event())
    transactions = _transactions(monkeypatch)
    monkeypatch.setattr(transactions, "producer", _SlowCommit())
    transactions.begin(0)
    ending = threading.Thread(
        target=lambda: transactions.finish(0, TopicPartition("positions", 0, 5))
    )
    ending.start()
    assert _SlowCommit.committing.wait(5)
    try:
        polled = threading.Thread(target=transactions.poll, args=(0,))
        polled.start()
        polled.join(5)
        assert not polled.is_alive(), "the group's poll waited for the brokers' commit"
    finally:
        _SlowCommit.release.set()
    ending.join(5)
    assert transactions.producer.calls == ["begin", "offsets 1", "commit"]
