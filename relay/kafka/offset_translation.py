"""Translating a consumer group's committed offsets from the source cluster to the target
(:mod:`relay.replication.translation`), and committing them there for the same group.

Nothing joins a group: the group's committed offsets (on both clusters), the replicator's
positions and the records are read by ``read_committed`` consumers that are only
assigned, and the translated offsets are written with the admin API, which the brokers
accept only while the group has no active member.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka.admin import AdminClient

from relay.errors import ConfigurationError, KafkaError, OffsetTranslationError
from relay.kafka.admin import admin_client, group_members
from relay.kafka.errors import kafka_reason, lib_error
from relay.kafka.group_offsets import ClusterReader, header, partitions
from relay.replication.group_sync import sync_metadata
from relay.replication.translation import (
    ProbedCopy,
    TargetPartition,
    TranslatedOffset,
    Translation,
    TranslationStatus,
    changes,
    translate_offset,
)
from relay.replication.types import (
    SOURCE_OFFSET_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER,
    Route,
)
from relay.settings.replicate import ReplicateSettings

log = logging.getLogger(__name__)

# How the brokers refuse offsets committed from outside for a group with active members.
_ACTIVE_CODES = frozenset(
    {
        LibKafkaError.UNKNOWN_MEMBER_ID,
        LibKafkaError.ILLEGAL_GENERATION,
        LibKafkaError.REBALANCE_IN_PROGRESS,
    }
)


class KafkaOffsetTranslator:
    """Translates ``group``'s committed offsets of the selected source topics to their
    target topics, and commits them for the same group on the target cluster."""

    def __init__(self, settings: ReplicateSettings, group: str) -> None:
        if group == settings.group:
            raise ConfigurationError(
                f"group {group} is the replicator's own group (--group): its offsets on the "
                "target are the replicator's positions; name the consumers' group"
            )
        self._settings, self._group = settings, group
        self._timeout = max(settings.source.request_timeout_s, settings.target.request_timeout_s)
        self._source_admin = admin_client(settings.source)
        self._target_admin = admin_client(settings.target)
        # A rejected configuration ends the command (what was made before is collected).
        self._source = ClusterReader(settings.source, group, "source cluster")
        self._target = ClusterReader(settings.target, group, "target cluster")
        self._positions = ClusterReader(settings.target, settings.group, "target cluster")

    def translate(self) -> list[TranslatedOffset]:
        """One row per partition of the selected source topics, in topic and partition
        order; those the group committed no offset for are rows too (skipped)."""
        return self.translate_with_metadata()[0]

    def translate_with_metadata(
        self, *, sync: bool = False
    ) -> tuple[list[TranslatedOffset], dict[tuple[str, int], str]]:
        """:meth:`translate`, and the metadata of the group's committed offsets on the
        target (by target topic and partition). ``sync``: a continuous sync's round, for
        which a group without offsets yet and one consuming on the source are normal."""
        routes = self._routes()
        committed = self._source.committed([(r.topic, r.partition) for r in routes])
        if not committed and sync:
            return [], {}
        if not committed:
            raise ConfigurationError(
                f"group {self._group} has no committed offset on the source cluster for "
                f"{self._settings.selection.describe()}: nothing to translate (is the "
                "group's name right?)"
            )
        if not sync and (members := self._members(self._source_admin, "source cluster")):
            log.warning(
                "group %s has %d active member(s) on the source cluster: its offsets still "
                "move; stop its consumers there before the failover",
                self._group,
                members,
            )
        wanted = {r.target_topic for r in routes}
        targets = partitions(self._target_admin, "target", wanted.__contains__, self._timeout)
        copied = [
            (r.target_topic, r.partition)
            for r in routes
            if r.partition < targets.get(r.target_topic, 0)
        ]
        on_target = set(copied)
        # The positions first, the partitions' ends after (relay.replication.translation).
        positions = self._positions.committed(copied)
        entries = self._target.committed_entries(copied)
        current = {at: offset for at, (offset, _) in entries.items()}
        rows = []
        for route in routes:
            at = (route.target_topic, route.partition)
            source_offset = committed.get((route.topic, route.partition))
            if source_offset is None:
                found = Translation(None, TranslationStatus.NO_OFFSET)
            elif at not in on_target:  # no target partition yet
                found = Translation(None, TranslationStatus.NOT_REPLICATED)
            else:
                found = self._translate(route, source_offset, positions.get(at, 0))
            rows.append(found.row(route, source_offset, current.get(at)))
        return rows, {at: metadata for at, (_, metadata) in entries.items()}

    def _routes(self) -> list[Route]:
        selection = self._settings.selection
        topics = partitions(self._source_admin, "source", selection.selects, self._timeout)
        if not topics:
            raise ConfigurationError(f"no source topic matches {selection.describe()}")
        return [
            Route(topic, p, selection.target_topic(topic))
            for topic in sorted(topics)
            for p in range(topics[topic])
        ]

    def _translate(self, route: Route, committed: int, position: int) -> Translation:
        source_end = self._source.bounds(route.topic, route.partition)[1]
        start, end = self._target.bounds(route.target_topic, route.partition)

        def source_probe(m: int) -> int | None:
            found = self._source.first(route.topic, route.partition, m, source_end)
            return None if found is None else found.offset()

        return translate_offset(
            committed,
            TargetPartition(position, start, end),
            lambda m: self._copy(route, m, end),
            source_end=source_end,
            source_probe=source_probe,
        )

    def _copy(self, route: Route, offset: int, end: int) -> ProbedCopy | None:
        """The first committed copy in the target partition at ``offset`` or later and
        below ``end``, with the source offset it is a copy of."""
        message = self._target.first(route.target_topic, route.partition, offset, end)
        if message is None:
            return None
        at = message.offset() or 0
        topic, partition, source = (
            header(message, name)
            for name in (SOURCE_TOPIC_HEADER, SOURCE_PARTITION_HEADER, SOURCE_OFFSET_HEADER)
        )
        if (topic, partition) != (route.topic, str(route.partition)) or not source.isdigit():
            raise OffsetTranslationError(
                f"{route.target_topic}[{route.partition}] offset {at} is not a copy of "
                f"{route}: its provenance headers name topic {topic}, partition {partition}, "
                f"offset {source}; nothing was changed"
            )
        return ProbedCopy(at, int(source))

    def apply(self, rows: Iterable[TranslatedOffset]) -> list[TranslatedOffset]:
        """Commit the rows that change the group's offsets on the target (translated or
        caught up), and return them; the others are left alone. Refused while the group
        has active members on the target."""
        todo = changes(rows)
        if not todo:
            return []
        if members := self.target_members():
            raise OffsetTranslationError(
                f"group {self._group} has {members} active member(s) on the target cluster: "
                "its offsets can only be set while none of its consumers runs there; stop "
                "them and run it again (nothing was changed)"
            )
        offsets = [
            TopicPartition(
                row.target_topic,
                row.partition,
                -1 if row.target_offset is None else row.target_offset,
                metadata=sync_metadata(row.topic, row.partition, row.source_offset),
            )
            for row in todo
        ]
        request = ConsumerGroupTopicPartitions(self._group, offsets)
        try:
            futures = self._target_admin.alter_consumer_group_offsets(
                [request], request_timeout=self._timeout
            )
            result = futures[self._group].result()
        except KafkaException as exc:
            raise self._refused(lib_error(exc), kafka_reason(exc)) from None
        for tp in result.topic_partitions or ():
            if tp.error is not None:
                raise self._refused(tp.error, f"{tp.topic}[{tp.partition}]: {tp.error.str()}")
        log.debug("group %s: %d offset(s) committed on the target cluster", self._group, len(todo))
        return todo

    def _refused(self, err: LibKafkaError | None, reason: str) -> Exception:
        if err is not None and err.code() in _ACTIVE_CODES:
            return OffsetTranslationError(
                f"the target cluster refused group {self._group}'s offsets ({reason}): a "
                "consumer of the group runs there; stop it and run it again"
            )
        return KafkaError(
            f"committing group {self._group}'s offsets on the target cluster failed: {reason}",
            code=None if err is None else err.name(),
        )

    def _members(self, admin: AdminClient, cluster: str) -> int:
        """How many active members the group has on ``cluster``."""
        return group_members(admin, self._group, self._timeout, cluster)

    def target_members(self) -> int:
        """How many active members the group has on the target cluster."""
        return self._members(self._target_admin, "target cluster")

    def close(self) -> None:
        for reader in (self._source, self._target, self._positions):
            reader.close()
