"""Typed mirror settings: the relay's connections plus ``RELAY_MIRROR_*`` (flags win)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relay.errors import ConfigurationError
from relay.settings.loader import SettingsSource, check_owned_properties
from relay.settings.relay import RelaySettings

DEFAULT_GROUP = "relay-mirror"
MIRROR_ENV_PREFIX = "RELAY_MIRROR_"

# Consumer properties the mirror sets itself: its guarantees depend on them.
MIRROR_OWNED_PROPERTIES = frozenset(
    {
        "partition.assignment.strategy",
        "enable.partition.eof",
        "auto.offset.reset",
        "enable.auto.offset.store",
        "group.protocol",
    }
)


@dataclass(frozen=True, slots=True)
class MirrorSettings:
    relay: RelaySettings  # database URL and Kafka connection
    mapping_path: str
    group: str = DEFAULT_GROUP
    batch_size: int = 2000
    max_wait_s: float = 0.5
    topics: tuple[str, ...] | None = None
    idle_transaction_timeout_s: float = 60.0
    record_retries: int = 10  # tries of a record refused with an error that may heal

    def describe(self) -> dict[str, str]:
        """The settings as text that is safe to log."""
        shown = self.relay.describe()
        return {
            "database_url": shown["database_url"],
            "kafka": shown["kafka"],
            "metrics": shown["metrics"],
            "mapping": self.mapping_path,
            "group": self.group,
            "batch_size": str(self.batch_size),
            "max_wait_s": str(self.max_wait_s),
            "record_retries": str(self.record_retries),
            "topics": ",".join(self.topics) if self.topics else "(all mapped)",
        }


def load_mirror_settings(
    relay: RelaySettings,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> MirrorSettings:
    """Mirror settings from ``RELAY_MIRROR_*``, with CLI ``overrides`` (None ignored)."""
    source = SettingsSource(overrides, environ, prefix=MIRROR_ENV_PREFIX)
    check_owned_properties(relay.kafka.properties, MIRROR_OWNED_PROPERTIES, "the mirror")
    mapping_path = source.text("config")
    if not mapping_path:
        raise ConfigurationError(
            "no mirror mapping: set RELAY_MIRROR_CONFIG or --mapping (a TOML file, "
            "see docs/mirror.md)"
        )
    topics = None
    if raw_topics := source.text("topics"):
        topics = tuple(t.strip() for t in raw_topics.split(",") if t.strip())
    found: dict[str, Any] = {
        "group": source.non_empty("group"),
        "batch_size": source.positive_int("batch_size"),
        "max_wait_s": source.positive_float("max_wait_s"),
        "idle_transaction_timeout_s": source.positive_float("idle_transaction_timeout_s"),
        "record_retries": source.positive_int("record_retries"),
    }
    return MirrorSettings(
        relay=relay,
        mapping_path=mapping_path,
        topics=topics,
        **{name: value for name, value in found.items() if value is not None},
    )
