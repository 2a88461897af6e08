"""A running relay follows changes of a destination topic's max.message.bytes: a raised
limit lets through what it would have refused, a lowered one dead-letters what the broker
now refuses instead of retrying the batch for ever (I5)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

import relay
from tests.integration.support import RelayTestEnv, read_committed, start_relay, wait_until
from tests.integration.writes import publish_events

SMALL, LARGE = 4000, 20_000


def _set_limit(admin: AdminClient, topic: str, limit: int) -> None:
    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry(
                "max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(30)


def _dead(env: RelayTestEnv) -> set[int]:
    return {int(r[0]) for r in env.sql("SELECT outbox_id FROM outbox_dead_letters")}  # type: ignore[call-overload]


def _published(env: RelayTestEnv, topic: str) -> set[int]:
    return {c.outbox_id for c in read_committed(env.bootstrap_servers, topic, timeout=10)}


def test_a_running_relay_follows_the_topics_size_limit_up_and_down(
    relay_env: RelayTestEnv,
    make_topic: Callable[..., str],
    kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=1, config={"max.message.bytes": str(SMALL)})
    # A key each: a key's later rows would follow its dead letter (test_missing_topics.py).
    log = tmp_path / "relay.log"
    service = start_relay(relay_env, "run", log=log)
    try:
        (too_big,) = publish_events(relay_env.database_url, [relay.Event(topic, "k1", b"x" * 6000)])
        wait_until(lambda: _dead(relay_env) == {too_big}, 60, "the 6 kB row to be refused")

        _set_limit(kafka_admin, topic, LARGE)
        fits_now = publish_events(
            relay_env.database_url, [relay.Event(topic, "k2", b"y" * 6000)]
        ) - {too_big}
        wait_until(
            lambda: fits_now <= _published(relay_env, topic), 60, "the raised limit to be used"
        )

        _set_limit(kafka_admin, topic, SMALL)
        refused_now = (
            publish_events(
                relay_env.database_url,
                [relay.Event(topic, "k3", b"z" * 6000), relay.Event(topic, "k4", b"small")],
            )
            - {too_big}
            - fits_now
        )
        wait_until(
            lambda: relay_env.sql("SELECT count(*) FROM outbox") == [(0,)],
            60,
            "the lowered limit to dead-letter the row instead of retrying for ever",
        )
        assert service.poll() is None, log.read_text()
    finally:
        service.terminate()
        service.wait(60)
    assert len(_dead(relay_env) & refused_now) == 1
    assert len(_published(relay_env, topic) & refused_now) == 1
