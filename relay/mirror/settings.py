"""Typed mirror settings: the relay's connections plus ``RELAY_MIRROR_*`` (flags win)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from relay.config import RelaySettings, _positive_float, _positive_int, check_kafka_properties
from relay.errors import ConfigurationError
from relay.mirror.consumer import MIRROR_OWNED_PROPERTIES

DEFAULT_GROUP = "relay-mirror"


@dataclass(frozen=True, slots=True)
class MirrorSettings:
    relay: RelaySettings  # database URL and Kafka connection
    mapping_path: str
    group: str = DEFAULT_GROUP
    batch_size: int = 2000
    max_wait_s: float = 0.5
    topics: tuple[str, ...] | None = None
    idle_transaction_timeout_s: float = 60.0

    def describe(self) -> dict[str, str]:
        """The settings as text that is safe to log."""
        shown = self.relay.describe()
        return {
            "database_url": shown["database_url"],
            "kafka": shown["kafka"],
            "mapping": self.mapping_path,
            "group": self.group,
            "batch_size": str(self.batch_size),
            "max_wait_s": str(self.max_wait_s),
            "topics": ",".join(self.topics) if self.topics else "(all mapped)",
        }


def load_mirror_settings(
    relay: RelaySettings,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> MirrorSettings:
    """Mirror settings from ``RELAY_MIRROR_*``, with CLI ``overrides`` (None ignored)."""
    env = os.environ if environ is None else environ
    given = {k: v for k, v in (overrides or {}).items() if v is not None}

    def pick(name: str) -> str | None:
        if name in given:
            return str(given[name])
        return env.get(f"RELAY_MIRROR_{name.upper()}")

    check_kafka_properties(relay.kafka.properties, MIRROR_OWNED_PROPERTIES, "the mirror")
    mapping_path = pick("config")
    if not mapping_path:
        raise ConfigurationError(
            "no mirror mapping: set RELAY_MIRROR_CONFIG or --mapping (a TOML file, "
            "see docs/mirror.md)"
        )
    group = pick("group") or DEFAULT_GROUP
    if not group.strip():
        raise ConfigurationError("RELAY_MIRROR_GROUP must not be empty")
    topics = None
    if raw_topics := pick("topics"):
        topics = tuple(t.strip() for t in raw_topics.split(",") if t.strip())
    settings = MirrorSettings(relay=relay, mapping_path=mapping_path, group=group, topics=topics)
    if (value := pick("batch_size")) is not None:
        batch = _positive_int("RELAY_MIRROR_BATCH_SIZE", value)
        settings = replace(settings, batch_size=batch)
    if (value := pick("max_wait_s")) is not None:
        settings = replace(settings, max_wait_s=_positive_float("RELAY_MIRROR_MAX_WAIT_S", value))
    if (value := pick("idle_transaction_timeout_s")) is not None:
        timeout = _positive_float("RELAY_MIRROR_IDLE_TRANSACTION_TIMEOUT_S", value)
        settings = replace(settings, idle_transaction_timeout_s=timeout)
    return settings
