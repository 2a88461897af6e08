"""Which process a member that takes a relay partition over fences
(relay.kafka.departed_members): only one the partition's position names that is no longer
a member of the group, once."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException

from relay.kafka.departed_members import DepartedMembers

_ME = "p-member-me"


def _departed(
    named: dict[int, str | None], members: set[str], fenced: list[str]
) -> DepartedMembers:
    return DepartedMembers(_ME, fenced.append, named.get, lambda: members, "p-positions")


def test_a_departed_process_named_by_the_position_is_fenced_once() -> None:
    fenced: list[str] = []
    departed = _departed({0: "p-member-dead", 1: "p-member-dead"}, {_ME}, fenced)
    departed.end_transaction_left_by(0)
    departed.end_transaction_left_by(1)
    assert fenced == ["p-member-dead"]


@pytest.mark.parametrize(
    "named", [None, _ME, "p-member-alive"], ids=["no position", "mine", "a member"]
)
def test_no_fence_for_no_position_this_process_or_a_current_member(named: str | None) -> None:
    fenced: list[str] = []
    _departed({0: named}, {_ME, "p-member-alive"}, fenced).end_transaction_left_by(0)
    assert fenced == []


def test_a_check_that_fails_is_logged_and_fences_nothing(caplog: pytest.LogCaptureFixture) -> None:
    fenced: list[str] = []

    def unreachable() -> set[str]:
        raise KafkaException(LibKafkaError(LibKafkaError._TIMED_OUT, "timed out"))

    departed = DepartedMembers(_ME, fenced.append, {0: "p-member-x"}.get, unreachable, "g")
    with caplog.at_level(logging.WARNING):
        departed.end_transaction_left_by(0)
    assert fenced == []
    assert "could not end the transaction a departed member may have left open" in caplog.text
