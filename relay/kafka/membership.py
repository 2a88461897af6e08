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

Continuous `relay replicate` processes share the source partitions the same way
(:mod:`relay.kafka.replica_members`): :class:`Membership` is the group, whatever its
partitions stand for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition

from relay.errors import ConfigurationError
from relay.kafka.admin import admin_client, group_members
from relay.kafka.errors import kafka_reason, translate
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.settings.connections import KafkaSettings
from relay.settings.relay import RelaySettings

log = logging.getLogger(__name__)
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)

K = TypeVar("K")
Partitions = Callable[[Sequence[int]], None]


class Membership(Generic[K]):
    """This process's membership of a members group, subscribed to topics whose
    partitions stand for the units shared (:meth:`_units` says which); :meth:`poll` runs
    ``assigned`` and ``revoked`` (with units) on the polling thread whenever the group
    moves partitions. ``paused``: the topics hold records, which are never fetched."""

    noun = "partitions"  # of the units, in the log

    def __init__(
        self,
        kafka: KafkaSettings,
        group: str,
        session_ms: int,
        *,
        assigned: Callable[[Sequence[K]], None],
        revoked: Callable[[Sequence[K]], None],
        paused: bool = False,
        metadata_refresh_ms: int | None = None,
        instance_id: str | None = None,
        client_id: str | None = None,
    ) -> None:
        self._assigned, self._revoked, self._paused = assigned, revoked, paused
        self._group = group
        config = {
            **kafka.client_config(),
            "group.id": group,
            # With one transaction per process the group is the positions group, whose
            # committed offsets are the positions: read only once committed.
            "isolation.level": "read_committed",
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(100, session_ms // 5),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "latest",
        }
        if metadata_refresh_ms is not None:  # how soon partitions added are assigned
            config["topic.metadata.refresh.interval.ms"] = metadata_refresh_ms
        if instance_id is not None:  # a static member: keeps its partitions over a restart
            config["group.instance.id"] = instance_id
        if client_id is not None:  # how the group's description names this member
            config["client.id"] = client_id
        try:
            self._consumer = Consumer(config, logger=_librdkafka_log)
        except KafkaException as exc:
            raise ConfigurationError(f"Kafka configuration rejected: {kafka_reason(exc)}") from None

    def subscribe(self, topics: Sequence[str]) -> None:
        """Join the group with these topics, or change the subscription (the group then
        assigns the partitions of the topics added)."""
        try:
            self._consumer.subscribe(
                list(topics),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
        except KafkaException as exc:
            raise translate(exc, "joining the members group") from None

    def poll(self, timeout: float) -> None:
        """Keep the membership alive and deliver assignment changes (nothing is fetched:
        the topic holds no records, or its partitions are paused)."""
        try:
            msg = self._consumer.poll(timeout)
        except KafkaException as exc:
            raise translate(exc, f"polling group {self._group}") from None
        if msg is not None and msg.error() is not None:
            log.debug("group %s: %s", self._group, msg.error())

    def group_metadata(self) -> object:
        """The consumer's group metadata now (member id and generation), for
        ``send_offsets_to_transaction``; ask it on the polling thread only (elsewhere it
        blocks while a revoke callback runs)."""
        try:
            return self._consumer.consumer_group_metadata()
        except KafkaException as exc:
            raise translate(exc, f"reading group {self._group}'s metadata") from None

    def close(self) -> None:
        """Leave the group, so that the others take the partitions over at once."""
        try:
            self._consumer.close()
        except KafkaException as exc:
            log.debug("leaving group %s: %s", self._group, exc)

    def _units(self, partitions: Sequence[TopicPartition]) -> list[K]:
        raise NotImplementedError

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if self._paused and partitions:
            consumer.pause(partitions)
        if mine := self._units(partitions):
            self._assigned(mine)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if mine := self._units(partitions):
            self._revoked(mine)
        consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = self._units(partitions)
        log.warning(
            "lost %s %s: the members group moved on without this process "
            "(silent for longer than the session timeout)",
            self.noun,
            "[" + ", ".join(str(unit) for unit in lost) + "]",
            extra={"partitions": [u if isinstance(u, int) else str(u) for u in lost]},
        )
        self._on_revoke(consumer, partitions)


class KafkaMembership(Membership[int]):
    """A `relay run` process's membership: every process joins the members group
    (``<positions group>.members``) subscribed to the positions topic, whose partition
    ``p`` stands for relay partition ``p``."""

    noun = "relay partitions"

    def __init__(
        self,
        settings: RelaySettings,
        relay_partitions: int,
        *,
        assigned: Partitions,
        revoked: Partitions,
        group: str | None = None,
        instance_id: str | None = None,
        client_id: str | None = None,
    ) -> None:
        """``group``: the group to join (default: the members group; the positions group
        with one transaction per process, :mod:`relay.kafka.member_transactions`);
        ``instance_id``: a static member's name (``--member-id``); ``client_id``: this
        member's name in the group's description (its transactional id)."""
        super().__init__(
            settings.kafka,
            group or settings.members_group,
            settings.member_session_timeout_ms,
            assigned=assigned,
            revoked=revoked,
            paused=True,  # the positions topic: only its committed offsets matter
            instance_id=instance_id,
            client_id=client_id,
        )
        self._topic = settings.positions_topic
        self._count = relay_partitions

    def join(self) -> None:
        self.subscribe([self._topic])

    def _units(self, partitions: Sequence[TopicPartition]) -> list[int]:
        # A positions topic with more partitions than the outbox has relay partitions
        # (after the count was lowered) assigns the extra ones too: they stand for nothing.
        return sorted(tp.partition for tp in partitions if tp.partition < self._count)


def active_members(settings: RelaySettings, group: str | None = None) -> int:
    """How many `relay run` processes are members of the members group (or ``group``: the
    positions group, joined by processes with one transaction per process) now (a process
    that died stays a member until its session times out)."""
    admin = admin_client(settings.kafka)
    return group_members(
        admin, group or settings.members_group, settings.kafka.request_timeout_s, "Kafka cluster"
    )
