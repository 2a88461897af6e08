"""The mirror's settings (`relay mirror`, the mirror Spark job), each declared once in
:data:`MIRROR`, on top of the connections (:mod:`relay.settings.connections`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from relay.errors import ConfigurationError
from relay.settings.connections import (
    METRICS,
    METRICS_HOST,
    METRICS_PORT,
    Connections,
    load_connections,
    metrics_shown,
)
from relay.settings.properties import check_owned_properties
from relay.settings.registry import URL as _URL
from relay.settings.registry import RegistrySettings, load_registry_settings
from relay.settings.spec import Given, Setting, describe, names, non_empty, seconds, text, whole

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

MAPPING = Setting(
    "mapping_path",
    "RELAY_MIRROR_CONFIG",
    "--mapping",
    text,
    help="topic-to-table mapping, TOML",
    metavar="FILE",
)
LEGACY_GROUP = "relay-mirror"
"""The fixed default group of earlier versions: kept where it holds stored offsets."""
DATABASE_GROUP = "relay-mirror-<first 8 hex digits of the mirror database's id>"

GROUP = Setting(
    "group_name",
    "RELAY_MIRROR_GROUP",
    "--group",
    non_empty,
    help="consumer group; its offsets live in mirror_offsets",
    default_doc=f"the database's, {DATABASE_GROUP} ({LEGACY_GROUP} where that group holds "
    "stored offsets)",
    metavar="NAME",
)
BATCH_SIZE = Setting(
    "batch_size",
    "RELAY_MIRROR_BATCH_SIZE",
    "--batch-size",
    whole,
    2000,
    "records of one partition per database transaction",
    metavar="N",
)
MAX_WAIT = Setting(
    "max_wait_s",
    "RELAY_MIRROR_MAX_WAIT_S",
    "--max-wait",
    seconds,
    0.5,
    "longest a fetched record waits for its batch",
    metavar="SECONDS",
)
TOPICS = Setting(
    "topics",
    "RELAY_MIRROR_TOPICS",
    "--topics",
    names,
    help="only these mapped topics",
    default_doc="all mapped",
    metavar="A,B",
)
RECORD_RETRIES = Setting(
    "record_retries",
    "RELAY_MIRROR_RECORD_RETRIES",
    "--record-retries",
    whole,
    10,
    "tries of a record the database refuses with an error that may heal (a foreign key "
    "whose parent has not arrived) before it is dead-lettered",
    metavar="N",
)
IDLE_TRANSACTION_TIMEOUT = Setting(
    "idle_transaction_timeout_s",
    "RELAY_MIRROR_IDLE_TRANSACTION_TIMEOUT_S",
    None,
    seconds,
    60.0,
    "PostgreSQL ends a mirror session idle inside a transaction (a paused instance) after this",
)

MIRROR = (MAPPING, GROUP, BATCH_SIZE, MAX_WAIT, TOPICS, RECORD_RETRIES, IDLE_TRANSACTION_TIMEOUT)
"""The mirror's own settings, by field of :class:`MirrorSettings`."""


@dataclass(frozen=True, slots=True)
class MirrorSettings:
    connections: Connections  # database URL and Kafka connection
    mapping_path: str
    group_name: str | None = GROUP.default  # None: the database's (relay.commands.groups)
    batch_size: int = BATCH_SIZE.default
    max_wait_s: float = MAX_WAIT.default
    topics: tuple[str, ...] | None = TOPICS.default
    idle_transaction_timeout_s: float = IDLE_TRANSACTION_TIMEOUT.default
    record_retries: int = (
        RECORD_RETRIES.default
    )  # tries of a record refused with an error that may heal
    metrics_port: int | None = METRICS_PORT.default
    metrics_host: str = METRICS_HOST.default
    # The schema registry of tables whose format is avro or json_schema (None: not given).
    registry: RegistrySettings | None = None

    @property
    def group(self) -> str:
        """The consumer group, once the default is resolved (relay.commands.groups)."""
        if self.group_name is None:
            raise ConfigurationError("the mirror's consumer group is not resolved yet")
        return self.group_name

    def with_group(self, group: str) -> MirrorSettings:
        return replace(self, group_name=group)

    def describe(self) -> dict[str, str]:
        """The settings as text that is safe to log."""
        return {
            **self.connections.describe(),
            "metrics": metrics_shown(self.metrics_host, self.metrics_port),
            **describe(MIRROR, self),
            **({} if self.registry is None else {"schema_registry": _URL.shown(self.registry.url)}),
        }


def load_mirror_settings(
    flags: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None
) -> MirrorSettings:
    """Mirror settings from the flags (``vars(args)``; None: not given) over ``RELAY_*``."""
    given = Given(flags, environ)
    connections = load_connections(given)
    check_owned_properties(connections.kafka.properties, MIRROR_OWNED_PROPERTIES, "the mirror")
    mapping_path = given.required(MAPPING, "mirror mapping", "a TOML file, see docs/mirror.md")
    found = given.values(MIRROR)
    found["mapping_path"] = mapping_path
    found["topics"] = found["topics"] or None  # none named: all mapped
    registry = load_registry_settings(flags, environ) if given.origin(_URL) else None
    return MirrorSettings(connections, **found, **given.values(METRICS), registry=registry)


@dataclass(frozen=True, slots=True)
class MirrorSelection:
    """The mirror's settings a command that reads the mirror's tables takes (`relay
    status`, `relay dead-letters`): its mapping, group and topics, when given."""

    mapping_path: str | None
    group: str | None
    topics: tuple[str, ...] | None


def load_mirror_selection(
    flags: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None
) -> MirrorSelection:
    """The mapping, group and topics where given (None: not given, no default)."""
    given = Given(flags, environ)
    group = given.value(GROUP) if given.origin(GROUP) else None
    return MirrorSelection(given.value(MAPPING) or None, group, given.value(TOPICS) or None)
