"""Sharing the relay partitions among `relay run` processes: a Kafka consumer group.

Every process joins the members group (``<positions group>.members``) subscribed to the
positions topic, whose partition ``p`` stands for relay partition ``p``. The broker's
group coordinator decides which member holds which partition (the cooperative-sticky
assignor: only the partitions that move change hands, and they are spread evenly), and
takes a silent member's partitions away after ``member.session.timeout.ms``. The group
only says who *should* publish a partition; exactly-once comes from fencing, as before:
a member that starts a relay partition fences its previous owner through the
partition's ``transactional.id`` (I3, docs/invariants.md). Nothing is read from the
positions topic and no offset is ever committed for this group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from relay.errors import ConfigurationError
from relay.kafka.admin import admin_client, group_members
from relay.kafka.errors import kafka_reason, translate
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.relay import RelaySettings

log = logging.getLogger(__name__)
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)

Partitions = Callable[[Sequence[int]], None]


class KafkaMembership:
    """This process's membership; :meth:`poll` runs ``assigned`` and ``revoked`` (with
    relay partitions) on the polling thread whenever the group moves partitions."""

    def __init__(
        self,
        settings: RelaySettings,
        relay_partitions: int,
        *,
        assigned: Partitions,
        revoked: Partitions,
    ) -> None:
        self._topic = settings.positions_topic
        self._count = relay_partitions
        self._assigned, self._revoked = assigned, revoked
        session_ms = settings.member_session_timeout_ms
        config = {
            **settings.kafka.client_config(),
            "group.id": settings.members_group,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(100, session_ms // 5),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "latest",
        }
        try:
            self._consumer = Consumer(config, logger=_librdkafka_log)
        except KafkaException as exc:
            raise ConfigurationError(f"Kafka configuration rejected: {kafka_reason(exc)}") from None

    def join(self) -> None:
        self._consumer.subscribe(
            [self._topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def poll(self, timeout: float) -> None:
        """Keep the membership alive and deliver assignment changes (the positions topic
        holds no records, so nothing else comes back)."""
        try:
            msg = self._consumer.poll(timeout)
        except KafkaException as exc:
            raise translate(exc, "polling the members group") from None
        if msg is not None and msg.error() is not None:
            log.debug("members group: %s", msg.error())

    def close(self) -> None:
        """Leave the group, so that the others take the partitions over at once."""
        try:
            self._consumer.close()
        except KafkaException as exc:
            log.debug("leaving the members group: %s", exc)

    def _relay_partitions(self, partitions: list[TopicPartition]) -> list[int]:
        # A positions topic with more partitions than the outbox has relay partitions
        # (after the count was lowered) assigns the extra ones too: they stand for nothing.
        return sorted(tp.partition for tp in partitions if tp.partition < self._count)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if mine := self._relay_partitions(partitions):
            self._assigned(mine)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if mine := self._relay_partitions(partitions):
            self._revoked(mine)
        consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = self._relay_partitions(partitions)
        log.warning(
            "lost relay partitions %s: the members group moved on without this process "
            "(silent for longer than the session timeout)",
            lost,
            extra={"partitions": lost},
        )
        self._on_revoke(consumer, partitions)


def active_members(settings: RelaySettings) -> int:
    """How many `relay run` processes are members of the members group now (a process
    that died stays a member until its session times out)."""
    admin = admin_client(settings.kafka)
    return group_members(
        admin, settings.members_group, settings.kafka.request_timeout_s, "Kafka cluster"
    )
