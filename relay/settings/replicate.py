"""Typed replicator settings: two clusters and ``RELAY_REPLICATE_*`` (flags win), built
and checked from their declarations in relay.settings.replicate_spec."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from relay.errors import ConfigurationError
from relay.settings.connections import (
    METRICS,
    METRICS_HOST,
    METRICS_PORT,
    KafkaSettings,
    load_kafka_settings,
    metrics_shown,
)
from relay.settings.properties import check_owned_properties
from relay.settings.replicate_spec import (
    REPLICATE,
    SELECTION,
    SOURCE,
    SOURCE_OWNED_PROPERTIES,
    TARGET,
    TOPIC_PATTERN,
    TOPICS,
)
from relay.settings.spec import Given, describe

_DEFAULTS = {setting.name: setting.default for setting in REPLICATE}


@dataclass(frozen=True, slots=True)
class TopicSelection:
    """Which source topics are replicated, and the target name of each."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None  # a regular expression a whole topic name matches
    target_prefix: str = ""

    def selects(self, topic: str) -> bool:
        if topic.startswith("__"):
            return False  # the brokers' internal topics
        if topic in self.topics:
            return True
        return self.pattern is not None and re.fullmatch(self.pattern, topic) is not None

    def target_topic(self, topic: str) -> str:
        return self.target_prefix + topic

    def describe(self) -> str:
        chosen = [*self.topics, *([f"/{self.pattern}/"] if self.pattern else [])]
        rename = f" -> {self.target_prefix}<topic>" if self.target_prefix else ""
        return ", ".join(chosen) + rename


@dataclass(frozen=True, slots=True)
class ReplicateSettings:
    source: KafkaSettings
    target: KafkaSettings
    selection: TopicSelection
    # on the target: each replicated partition's position; None: the source cluster's
    group_name: str | None = _DEFAULTS["group_name"]
    transactional_id_prefix: str | None = _DEFAULTS["transactional_id_prefix"]  # None: group's
    source_alias: str | None = _DEFAULTS["source_alias"]  # None: the source cluster's id
    batch_size: int = _DEFAULTS["batch_size"]
    batch_bytes: int = _DEFAULTS["batch_bytes"]
    max_wait_s: float = _DEFAULTS["max_wait_s"]  # longest a read waits for a first record
    topic_refresh_s: float = _DEFAULTS["topic_refresh_s"]  # new topics and partitions
    replication_factor: int | None = _DEFAULTS["replication_factor"]  # None: broker's
    retry_attempts: int = _DEFAULTS["retry_attempts"]
    position_refresh_s: float = _DEFAULTS["position_refresh_s"]
    target_compression: str = _DEFAULTS["target_compression"]
    heartbeat_interval_s: float = _DEFAULTS["heartbeat_interval_s"]
    member_session_timeout_ms: int = _DEFAULTS["member_session_timeout_ms"]
    fence_members: bool = _DEFAULTS["fence_members"]
    sync_groups: tuple[str, ...] = _DEFAULTS["sync_groups"]  # consumer groups to sync
    sync_interval_s: float = _DEFAULTS["sync_interval_s"]
    metrics_port: int | None = METRICS_PORT.default
    metrics_host: str = METRICS_HOST.default

    @property
    def group(self) -> str:
        """The group, once the default is resolved (relay.commands.groups)."""
        if self.group_name is None:
            raise ConfigurationError("the replicator's group is not resolved yet")
        return self.group_name

    @property
    def members_group(self) -> str:
        """The consumer group on the target whose members (continuous `relay replicate`
        instances) share the source partitions: named after the transactional-id prefix
        (the group by default), as only instances that fence each other may share."""
        return f"{self.prefix}.members"

    def with_group(self, group: str) -> ReplicateSettings:
        return replace(self, group_name=group)

    def selects_target(self, target_topic: str) -> bool:
        """Whether ``target_topic`` is the copy of a topic this selection copies."""
        prefix = self.selection.target_prefix
        return target_topic.startswith(prefix) and self.selection.selects(
            target_topic[len(prefix) :]
        )

    @property
    def prefix(self) -> str:
        return self.transactional_id_prefix or self.group

    def transactional_id(self, target_topic: str, partition: int) -> str:
        return f"{self.prefix}-{target_topic}-{partition}"

    def describe(self) -> dict[str, str]:
        """The settings as text that is safe to log."""
        return {
            "source": self.source.summary(),
            "target": self.target.summary(),
            "topics": self.selection.describe(),
            **describe(REPLICATE, self),
            "metrics": metrics_shown(self.metrics_host, self.metrics_port),
        }


def load_replicate_settings(
    flags: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None
) -> ReplicateSettings:
    """Replicator settings from the flags (``vars(args)``; None: not given) over
    ``RELAY_REPLICATE_*`` (and ``RELAY_METRICS_*``)."""
    given = Given(flags, environ)
    source = load_kafka_settings(given, SOURCE)
    target = load_kafka_settings(given, TARGET)
    check_owned_properties(source.properties, SOURCE_OWNED_PROPERTIES, "the replicator")
    return ReplicateSettings(
        source=source,
        target=target,
        selection=_selection(given),
        **given.values(REPLICATE),
        **given.values(METRICS),
    )


def _selection(given: Given) -> TopicSelection:
    selection = TopicSelection(**given.values(SELECTION))
    if not selection.topics and selection.pattern is None:
        raise ConfigurationError(
            f"no topics to replicate: set {TOPICS.env} ({TOPICS.flag} A,B) or "
            f"{TOPIC_PATTERN.env} ({TOPIC_PATTERN.flag} REGEX)"
        )
    for topic in selection.topics:
        if topic.startswith("__"):
            raise ConfigurationError(f"{topic!r} is a broker's internal topic, not replicated")
    return selection
