"""Typed replicator settings: two clusters and ``RELAY_REPLICATE_*`` (flags win).

The source and the target cluster each have their own connection, so each can have its
own SASL and SSL properties::

    RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS   --source-bootstrap-servers
    RELAY_REPLICATE_SOURCE_PROPERTIES='a=b;c=d'   --source-property NAME=VALUE
    RELAY_REPLICATE_SOURCE_CONFIG_FILE         --source-config-file
    (the same with TARGET / --target-...)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from relay.errors import ConfigurationError
from relay.settings.loader import SettingsSource, check_owned_properties
from relay.settings.relay import (
    ALL_INTERFACES,
    KafkaSettings,
    load_kafka_settings,
    metrics_settings,
)

REPLICATE_ENV_PREFIX = "RELAY_REPLICATE_"
DEFAULT_GROUP = "relay-replicate"

# Consumer properties the replicator sets itself on the source: its guarantees need them.
SOURCE_OWNED_PROPERTIES = frozenset(
    {"auto.offset.reset", "enable.auto.offset.store", "enable.partition.eof"}
)


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
    group: str = DEFAULT_GROUP  # on the target: holds each replicated partition's position
    transactional_id_prefix: str | None = None  # None: the group's name
    source_alias: str | None = None  # None: the source cluster's id
    batch_size: int = 5000
    batch_bytes: int = 16 * 1024 * 1024
    max_wait_s: float = 0.05  # longest a read waits for the first record of a batch
    topic_refresh_s: float = 30.0  # look for new topics and partitions this often
    replication_factor: int | None = None  # of the target topics it creates (None: broker's)
    retry_attempts: int = 8
    position_refresh_s: float = 3600.0
    metrics_port: int | None = None  # serve /metrics, /healthz, /readyz (None: do not)
    metrics_host: str = ALL_INTERFACES

    @property
    def prefix(self) -> str:
        return self.transactional_id_prefix or self.group

    def transactional_id(self, target_topic: str, partition: int) -> str:
        return f"{self.prefix}-{target_topic}-{partition}"

    def describe(self) -> dict[str, str]:
        """The settings as text that is safe to log."""
        return {
            "source": ", ".join(f"{k}={v}" for k, v in sorted(self.source.describe().items())),
            "target": ", ".join(f"{k}={v}" for k, v in sorted(self.target.describe().items())),
            "topics": self.selection.describe(),
            "group": self.group,
            "transactional_id_prefix": self.prefix,
            "source_alias": self.source_alias or "(the source cluster's id)",
            "batch_size": str(self.batch_size),
            "batch_bytes": str(self.batch_bytes),
            "metrics": f"{self.metrics_host}:{self.metrics_port}" if self.metrics_port else "off",
        }


def load_replicate_settings(
    overrides: Mapping[str, object] | None = None,
    source_pairs: Iterable[str] = (),
    target_pairs: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> ReplicateSettings:
    """Replicator settings from ``RELAY_REPLICATE_*``, with CLI ``overrides`` on top."""
    source = SettingsSource(overrides, environ, prefix=REPLICATE_ENV_PREFIX)
    clusters = {
        name: load_kafka_settings(source, pairs, connection=name, pairs_flag=f"--{name}-property")
        for name, pairs in (("source", source_pairs), ("target", target_pairs))
    }
    check_owned_properties(clusters["source"].properties, SOURCE_OWNED_PROPERTIES, "the replicator")
    found: dict[str, Any] = {
        name: source.non_empty(name)
        for name in ("group", "transactional_id_prefix", "source_alias")
    }
    for name in ("batch_size", "batch_bytes", "retry_attempts", "replication_factor"):
        found[name] = source.positive_int(name)
    for name in ("max_wait_s", "topic_refresh_s", "position_refresh_s"):
        found[name] = source.positive_float(name)
    # The metrics flags and variables are every command's (RELAY_METRICS_PORT/_HOST).
    found.update(metrics_settings(SettingsSource(overrides, environ)))
    return ReplicateSettings(
        source=clusters["source"],
        target=clusters["target"],
        selection=_selection(source),
        **{name: value for name, value in found.items() if value is not None},
    )


def _selection(source: SettingsSource) -> TopicSelection:
    topics = tuple(t.strip() for t in (source.text("topics") or "").split(",") if t.strip())
    pattern = source.non_empty("topic_pattern")
    if not topics and pattern is None:
        raise ConfigurationError(
            f"no topics to replicate: set {source.env_name('topics')} (--topics A,B) or "
            f"{source.env_name('topic_pattern')} (--topic-pattern REGEX)"
        )
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigurationError(
                f"{source.env_name('topic_pattern')} is not a regular expression: {exc}"
            ) from None
    for topic in topics:
        if topic.startswith("__"):
            raise ConfigurationError(f"{topic!r} is a broker's internal topic, not replicated")
    return TopicSelection(topics, pattern, source.text("target_prefix") or "")
