"""Typed relay settings, read from ``RELAY_*`` environment variables and CLI flags.

Every setting has an environment variable; the CLI flag of the same name wins over it.
Any librdkafka property (SASL, SSL, timeouts) passes through ``-X name=value``, a
properties file (``RELAY_KAFKA_CONFIG_FILE``) or ``RELAY_KAFKA_PROPERTIES``
(``name=value`` pairs separated by ``;``). The relay owns the properties that its
guarantees depend on; setting one of them is an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from relay.errors import ConfigurationError
from relay.runtime.secrets import Secret, mask_properties, mask_url
from relay.settings.loader import (
    SettingsSource,
    check_owned_properties,
    parse_property_pairs,
    read_properties_file,
)

# Properties the relay sets itself: a user value would break exactly-once delivery.
RELAY_OWNED_PROPERTIES = frozenset(
    {
        "transactional.id",
        "enable.idempotence",
        "isolation.level",
        "enable.auto.commit",
        "group.id",
        "partitioner",
        "bootstrap.servers",
    }
)


_FROM_DATABASE = "(the database's default)"
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 (metrics and health, for containers; docs/operations.md)


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    bootstrap_servers: str
    properties: Mapping[str, Secret] = field(default_factory=dict)
    transaction_timeout_ms: int = 60_000
    request_timeout_s: float = 15.0

    def client_config(self) -> dict[str, str | int | float | bool]:
        """librdkafka configuration shared by every client the relay creates."""
        config: dict[str, str | int | float | bool] = {
            k: v.reveal() for k, v in self.properties.items()
        }
        config["bootstrap.servers"] = self.bootstrap_servers
        return config

    def describe(self) -> dict[str, str]:
        shown = mask_properties({k: v.reveal() for k, v in self.properties.items()})
        shown["bootstrap.servers"] = self.bootstrap_servers
        return shown


@dataclass(frozen=True, slots=True)
class RelaySettings:
    database_url: Secret
    kafka: KafkaSettings
    transactional_id_prefix: str | None = None  # None: the database's default prefix
    positions_topic: str = "outbox-relay-positions"
    positions_group: str | None = None  # None: <the database's default prefix>-positions
    batch_size: int = 5000
    batch_bytes: int = 16 * 1024 * 1024  # keys and values per Kafka transaction, at most
    poll_interval_s: float = 0.5
    commit_watch_s: float = 0.01  # how often `relay run` looks for new commits
    cleanup: bool = True
    retry_attempts: int = 8
    position_refresh_s: float = 3600.0  # re-commit an idle partition's position this often
    # `relay run` processes that share the partitions: how long a silent member keeps its
    # relay partitions before the others take them over (the members group's session).
    member_session_timeout_ms: int = 10_000
    metrics_port: int | None = None  # serve /metrics, /healthz, /readyz (None: do not)
    metrics_host: str = ALL_INTERFACES

    def with_database_defaults(self, default_prefix: str) -> RelaySettings:
        """The prefix and positions group the database chose (``outbox_identity``) where
        none is set, so that two databases never share them by accident."""
        return replace(
            self,
            transactional_id_prefix=self.transactional_id_prefix or default_prefix,
            positions_group=self.positions_group or f"{default_prefix}-positions",
        )

    @property
    def prefix(self) -> str:
        """The transactional-id prefix, once :meth:`with_database_defaults` has run."""
        if self.transactional_id_prefix is None:
            raise ConfigurationError("the transactional-id prefix is not resolved yet")
        return self.transactional_id_prefix

    @property
    def group(self) -> str:
        """The positions group, once :meth:`with_database_defaults` has run."""
        if self.positions_group is None:
            raise ConfigurationError("the positions group is not resolved yet")
        return self.positions_group

    @property
    def members_group(self) -> str:
        """The consumer group whose members share the relay partitions (`relay run`)."""
        return f"{self.group}.members"

    def transactional_id(self, partition: int) -> str:
        return f"{self.prefix}-{partition}"

    def describe(self) -> dict[str, str]:
        """The settings as text that is safe to log."""
        return {
            "database_url": mask_url(self.database_url.reveal()),
            "kafka": ", ".join(f"{k}={v}" for k, v in sorted(self.kafka.describe().items())),
            "transactional_id_prefix": self.transactional_id_prefix or _FROM_DATABASE,
            "positions_topic": self.positions_topic,
            "positions_group": self.positions_group or _FROM_DATABASE,
            "batch_size": str(self.batch_size),
            "batch_bytes": str(self.batch_bytes),
            "poll_interval_s": str(self.poll_interval_s),
            "commit_watch_s": str(self.commit_watch_s),
            "cleanup": str(self.cleanup),
            "retry_attempts": str(self.retry_attempts),
            "position_refresh_s": str(self.position_refresh_s),
            "member_session_timeout_ms": str(self.member_session_timeout_ms),
            "metrics": f"{self.metrics_host}:{self.metrics_port}" if self.metrics_port else "off",
        }


_EXPECTED_URL = "expected postgresql+psycopg://user:password@host:port/database"


def check_database_url(url: str) -> str:
    """``url`` when it names PostgreSQL through psycopg 3 (``postgresql://`` is taken to
    mean that driver); a ConfigurationError otherwise."""
    scheme, sep, rest = url.partition("://")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a malformed port raises here)
    except ValueError:
        parts = None
    if not sep or parts is None or not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme, re.I):
        raise ConfigurationError(f"RELAY_DATABASE_URL is not a database URL ({_EXPECTED_URL})")
    backend, _, driver = scheme.partition("+")
    if backend != "postgresql":
        raise ConfigurationError(f"RELAY_DATABASE_URL must point at PostgreSQL, got {backend!r}")
    if driver not in ("", "psycopg"):
        raise ConfigurationError(
            f"RELAY_DATABASE_URL must use the psycopg driver (postgresql+psycopg://), "
            f"got {scheme!r}"
        )
    return f"postgresql+psycopg://{rest}"


def load_settings(
    overrides: Mapping[str, object] | None = None,
    kafka_pairs: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> RelaySettings:
    """Settings from ``RELAY_*``, with CLI ``overrides`` (None values ignored) on top."""
    source = SettingsSource(overrides, environ)
    database_url = source.text("database_url")
    if not database_url:
        raise ConfigurationError("no database: set RELAY_DATABASE_URL or --database-url")
    return RelaySettings(
        database_url=Secret(check_database_url(database_url)),
        kafka=load_kafka_settings(source, kafka_pairs),
        **_relay_changes(source),
    )


def load_kafka_settings(
    source: SettingsSource,
    kafka_pairs: Iterable[str] = (),
    *,
    connection: str = "kafka",
    pairs_flag: str = "-X",
) -> KafkaSettings:
    """One cluster's connection: ``<connection>_bootstrap_servers``, its properties file,
    ``<PREFIX><CONNECTION>_PROPERTIES`` and the ``pairs_flag`` pairs (which win)."""
    bootstrap = source.text(f"{connection}_bootstrap_servers")
    if not bootstrap:
        flag = "--" + connection.replace("_", "-") + "-bootstrap-servers"
        raise ConfigurationError(
            f"no Kafka broker: set {source.env_name(f'{connection}_bootstrap_servers')} or {flag}"
        )
    properties: dict[str, str] = {}
    if config_file := source.text(f"{connection}_config_file"):
        properties.update(read_properties_file(config_file))
    pairs_variable = source.env_name(f"{connection}_properties")
    env_pairs = source.environ(pairs_variable)
    properties.update(parse_property_pairs(env_pairs.split(";"), pairs_variable))
    properties.update(parse_property_pairs(kafka_pairs, pairs_flag))
    check_owned_properties(properties, RELAY_OWNED_PROPERTIES, "the relay")
    return KafkaSettings(
        bootstrap_servers=bootstrap,
        properties={k: Secret(v) for k, v in properties.items()},
        transaction_timeout_ms=source.positive_int("transaction_timeout_ms") or 60_000,
        request_timeout_s=source.positive_float("kafka_timeout_s") or 15.0,
    )


def _relay_changes(source: SettingsSource) -> dict[str, Any]:
    """The relay's own settings that are given, by field name."""
    found: dict[str, Any] = {
        name: source.non_empty(name)
        for name in ("transactional_id_prefix", "positions_topic", "positions_group")
    }
    found["batch_size"] = source.positive_int("batch_size")
    found["batch_bytes"] = source.positive_int("batch_bytes")
    found["retry_attempts"] = source.positive_int("retry_attempts")
    found["poll_interval_s"] = source.positive_float("poll_interval_s")
    found["commit_watch_s"] = source.positive_float("commit_watch_s")
    found["position_refresh_s"] = source.positive_float("position_refresh_s")
    found["member_session_timeout_ms"] = source.positive_int("member_session_timeout_ms")
    found["cleanup"] = source.boolean("cleanup")
    found.update(metrics_settings(source))
    return {name: value for name, value in found.items() if value is not None}


def metrics_settings(source: SettingsSource) -> dict[str, Any]:
    """``metrics_port`` and ``metrics_host`` where given (RELAY_METRICS_PORT/_HOST)."""
    found: dict[str, Any] = {}
    port = source.positive_int("metrics_port")
    if port is not None and port > 65535:
        name = source.env_name("metrics_port")
        raise ConfigurationError(f"{name} must be a TCP port (1..65535), got {port}")
    found["metrics_port"] = port
    found["metrics_host"] = source.non_empty("metrics_host")
    return {name: value for name, value in found.items() if value is not None}
