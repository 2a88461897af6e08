"""A run of its own beside `relay run` members: refused with one line, or let through
where the members group cannot be described (only the answer of the group is faked)."""

from __future__ import annotations

import logging

import pytest

from relay.commands import startup
from relay.errors import ConfigurationError, KafkaError
from relay.settings.relay import load_settings

ENV = {
    "RELAY_DATABASE_URL": "postgresql+psycopg://u:p@db/x",
    "RELAY_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
    "RELAY_TRANSACTIONAL_ID_PREFIX": "shop",
    "RELAY_POSITIONS_GROUP": "shop-positions",
}


def _members(answer: int | Exception, sharing: int = 0) -> object:
    """``answer`` for the members group; ``sharing`` for the positions group (members with
    one transaction per process, the default)."""

    def active_members(_settings: object, group: str | None = None) -> int:
        if group is not None:
            return sharing
        if isinstance(answer, Exception):
            raise answer
        return answer

    return active_members


def test_refused_while_members_run_unless_fence_members(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "active_members", _members(2))
    with pytest.raises(ConfigurationError) as refused:
        startup.refuse_beside_members(load_settings(environ=ENV), "relay run --once")
    assert str(refused.value).startswith(
        "relay run --once: 2 members of group shop-positions.members are running `relay run`"
    )
    assert refused.value.exit_code == 2
    startup.refuse_beside_members(load_settings(environ={**ENV, "RELAY_FENCE_MEMBERS": "1"}), "x")
    monkeypatch.setattr(startup, "active_members", _members(0))
    startup.refuse_beside_members(load_settings(environ=ENV), "relay run --once")


def test_a_group_it_may_not_describe_lets_the_run_go_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    denied = KafkaError("describing group failed", code="GROUP_AUTHORIZATION_FAILED")
    monkeypatch.setattr(startup, "active_members", _members(denied))
    with caplog.at_level(logging.WARNING, logger="relay.commands.startup"):
        startup.refuse_beside_members(load_settings(environ=ENV), "relay run --once")
    assert "cannot tell whether `relay run` processes share the partitions" in caplog.text
    other = KafkaError("broker down", code="_TRANSPORT")
    monkeypatch.setattr(startup, "active_members", _members(other))
    with pytest.raises(KafkaError):
        startup.refuse_beside_members(load_settings(environ=ENV), "relay run --once")


def test_refused_beside_process_transaction_members_even_with_fence_members(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Members with one transaction per process cannot be fenced by a run of its own."""
    monkeypatch.setattr(startup, "active_members", _members(0, sharing=1))
    for env in (ENV, {**ENV, "RELAY_FENCE_MEMBERS": "1"}):
        with pytest.raises(ConfigurationError) as refused:
            startup.refuse_beside_members(load_settings(environ=env), "relay run --once")
        assert str(refused.value).startswith(
            "relay run --once: 1 member of group shop-positions (`relay run`, one "
            "transaction per process) publishes the relay partitions"
        )


def test_the_check_after_a_fence_looks_at_process_transaction_members_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After its producers fenced their partitions, a run checks again for members that
    its fence cannot stop; members of the members group share its transactional ids."""
    monkeypatch.setattr(startup, "active_members", _members(2, sharing=0))
    startup.refuse_beside_members(load_settings(environ=ENV), "relay run --once", fenced=True)
    monkeypatch.setattr(startup, "active_members", _members(0, sharing=2))
    with pytest.raises(ConfigurationError, match="2 members of group shop-positions "):
        startup.refuse_beside_members(load_settings(environ=ENV), "relay run --once", fenced=True)


def test_a_positions_group_it_may_not_describe_is_warned_of_and_the_start_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    denied = KafkaError("describing group failed", code="GROUP_AUTHORIZATION_FAILED")

    def active_members(_settings: object, group: str | None = None) -> int:
        raise denied

    monkeypatch.setattr(startup, "active_members", active_members)
    partitioned = load_settings(environ={**ENV, "RELAY_PROCESS_TRANSACTIONS": "0"})
    with caplog.at_level(logging.WARNING, logger="relay.commands.startup"):
        startup.refuse_beside_members(load_settings(environ=ENV), "relay run --once", fenced=True)
        startup.refuse_mixed_sharing(partitioned)
        startup.refuse_mixed_sharing(load_settings(environ=ENV))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "relay run --once: cannot tell whether processes of group shop-positions are running:"
        " describing group failed",
        "relay run: cannot tell whether processes of group shop-positions are running:"
        " describing group failed",
        "relay run: cannot tell whether processes of group shop-positions.members are running:"
        " describing group failed",
    ]
