"""Which source topics are replicated, and their target topics: found, created, grown.

A target topic that is missing is created with the source's partition count (each record
keeps its partition) and the source's settings that change what the topic keeps
(:data:`COPIED_CONFIGS`, where the source sets them), with ``max.message.bytes`` raised by
:data:`HEADER_HEADROOM` for the provenance headers. An existing target topic with fewer
partitions than its source is refused, unless it holds this replicator's positions (the
source grew since it was created): then it grows to the source's count.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewPartitions, NewTopic

from relay.errors import ConfigurationError, KafkaError, TargetTopicError
from relay.kafka.admin import admin_client, check_broker
from relay.kafka.errors import kafka_reason, lib_error, translate
from relay.kafka.replica_writer import target_positions_consumer
from relay.replication.types import Route
from relay.settings.replicate import ReplicateSettings

log = logging.getLogger(__name__)

COPIED_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "delete.retention.ms",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "min.cleanable.dirty.ratio",
    "compression.type",
    "message.timestamp.type",
)
HEADER_HEADROOM = 16 * 1024
"""Added to the source's ``max.message.bytes`` on the target: room for the provenance
headers of a record at the source's limit."""
_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


@dataclass(frozen=True, slots=True)
class ReplicatedTopic:
    """A source topic and its target topic, as they are once the plan is applied."""

    topic: str
    target_topic: str
    partitions: int  # the source's partition count
    max_message_bytes: int  # the largest record the target topic is made to take
    configs: tuple[tuple[str, str], ...] = ()  # what a created target topic was given
    codec: str = "producer"  # the source topic's compression.type

    def compression(self, setting: str) -> str:
        """The target producer's compression.type for ``--target-compression``: a codec,
        or ``source``: the source topic's, lz4 where it keeps the producers' codec (a
        record may fit the source only compressed, and the copy must fit too)."""
        if setting != "source":
            return setting
        return {"producer": "lz4", "uncompressed": "none"}.get(self.codec, self.codec)


class TopicPlanner:
    """Lists the selected source topics and makes their target topics fit."""

    def __init__(self, settings: ReplicateSettings) -> None:
        self._settings = settings
        self._source = admin_client(settings.source)
        self._target = admin_client(settings.target)
        self._timeout = max(settings.source.request_timeout_s, settings.target.request_timeout_s)

    def check_clusters(self) -> None:
        """Fail fast, with one clear line, when either cluster does not answer or refuses
        the login."""
        check_broker(self._source, self._settings.source)
        check_broker(self._target, self._settings.target)

    def cluster_ids(self) -> tuple[str, str]:
        """The source and the target cluster's ids."""
        found = []
        for name, admin in (("source", self._source), ("target", self._target)):
            try:
                cluster = admin.describe_cluster(request_timeout=self._timeout).result()
            except KafkaException as exc:
                raise translate(exc, f"describing the {name} cluster") from None
            found.append(str(cluster.cluster_id))
        return found[0], found[1]

    def plan(self, *, strict: bool) -> list[ReplicatedTopic]:
        """The selected source topics, their target topics created or grown to fit.
        ``strict``: a topic named in the selection that does not exist is an error (else
        it is skipped, to be picked up once it exists)."""
        selection = self._settings.selection
        source = self._topics(self._source, "source")
        missing = [t for t in selection.topics if t not in source]
        if missing and strict:
            raise ConfigurationError(
                f"source topic(s) {', '.join(missing)} do not exist on the source cluster"
            )
        chosen = sorted(t for t in source if selection.selects(t))
        if not chosen:
            return []
        source_id, target_id = self.cluster_ids()
        configs = self._configs(chosen)
        target = self._topics(self._target, "target")
        planned = []
        for topic in chosen:
            target_topic = selection.target_topic(topic)
            if source_id == target_id and target_topic == topic:
                raise TargetTopicError(
                    f"{topic}: the source and the target are the same cluster; give the "
                    "copies other names (--target-prefix)"
                )
            copied, max_bytes, codec = configs[topic]
            item = ReplicatedTopic(topic, target_topic, source[topic], max_bytes, copied, codec)
            self._fit(item, target.get(target_topic))
            planned.append(item)
        return planned

    def routes(self) -> list[tuple[Route, bool]]:
        """Every partition of the selected source topics, and whether its target partition
        exists; nothing is created (`relay replicate --lag`)."""
        selection = self._settings.selection
        source = self._topics(self._source, "source")
        target = self._topics(self._target, "target")
        return [
            (Route(topic, p, name), p < target.get(name, 0))
            for topic in sorted(t for t in source if selection.selects(t))
            for name in [selection.target_topic(topic)]
            for p in range(source[topic])
        ]

    def _topics(self, admin: AdminClient, name: str) -> dict[str, int]:
        try:
            metadata = admin.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            raise translate(exc, f"listing the {name} cluster's topics") from None
        return {
            topic: len(meta.partitions)
            for topic, meta in metadata.topics.items()
            if meta.error is None
        }

    def _configs(
        self, topics: list[str]
    ) -> dict[str, tuple[tuple[tuple[str, str], ...], int, str]]:
        """Per source topic: the copied settings it sets, the largest record the target
        must take, and its compression.type."""
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        futures = self._source.describe_configs(resources, request_timeout=self._timeout)
        found = {}
        for resource, future in futures.items():
            try:
                entries = future.result()
            except KafkaException as exc:
                raise translate(exc, f"reading topic {resource.name}'s settings") from None
            copied = tuple(
                (name, str(entries[name].value))
                for name in COPIED_CONFIGS
                if name in entries and not entries[name].is_default
            )
            limit = entries.get("max.message.bytes")
            max_bytes = int(limit.value) if limit is not None else _DEFAULT_MAX_MESSAGE_BYTES
            codec = entries.get("compression.type")
            found[resource.name] = (
                copied,
                max_bytes + HEADER_HEADROOM,
                "producer" if codec is None else str(codec.value),
            )
        return found

    def _fit(self, item: ReplicatedTopic, existing: int | None) -> None:
        if existing is None:
            self._create(item)
        elif existing < item.partitions:
            if not self._holds_positions(item.target_topic, existing):
                raise TargetTopicError(
                    f"target topic {item.target_topic} has {existing} partitions, its source "
                    f"{item.topic} has {item.partitions}: records would change partition. "
                    "Add partitions to it (or delete it and let the replicator create it)"
                )
            self._grow(item, existing)

    def _create(self, item: ReplicatedTopic) -> None:
        factor = self._settings.replication_factor or -1
        configs = {**dict(item.configs), "max.message.bytes": str(item.max_message_bytes)}
        topic = NewTopic(item.target_topic, item.partitions, factor, config=configs)
        future = self._target.create_topics([topic], request_timeout=self._timeout)
        try:
            future[item.target_topic].result()
        except KafkaException as exc:
            err = lib_error(exc)
            if err is None or err.code() != err.TOPIC_ALREADY_EXISTS:
                raise KafkaError(
                    f"creating target topic {item.target_topic} failed: {kafka_reason(exc)}"
                ) from None
        log.info(
            "created target topic %s: %d partitions, %s",
            item.target_topic,
            item.partitions,
            ", ".join(f"{k}={v}" for k, v in sorted(configs.items())),
        )

    def _grow(self, item: ReplicatedTopic, existing: int) -> None:
        grown = NewPartitions(item.target_topic, item.partitions)
        future = self._target.create_partitions([grown], request_timeout=self._timeout)
        try:
            future[item.target_topic].result()
        except KafkaException as exc:
            raise KafkaError(
                f"adding partitions to target topic {item.target_topic} ({existing} -> "
                f"{item.partitions}, as its source) failed: {kafka_reason(exc)}"
            ) from None
        log.info(
            "target topic %s grown from %d to %d partitions, as its source",
            item.target_topic,
            existing,
            item.partitions,
        )

    def positions_held(self, group: str) -> list[str]:
        """The target topics of this selection on which ``group`` holds positions."""
        target = self._topics(self._target, "target")
        mine = sorted(t for t in target if self._settings.selects_target(t))
        return [t for t in mine if self._holds_positions(t, target[t], group)]

    def _holds_positions(self, target_topic: str, partitions: int, group: str = "") -> bool:
        settings = self._settings.with_group(group) if group else self._settings
        consumer = target_positions_consumer(settings)
        try:
            wanted = [TopicPartition(target_topic, p) for p in range(partitions)]
            found = consumer.committed(wanted, timeout=self._timeout)
        except KafkaException as exc:
            raise translate(exc, f"reading the positions of {target_topic}") from None
        finally:
            consumer.close()
        return any(tp.offset >= 0 for tp in found)
