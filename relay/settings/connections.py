"""The connections every command family shares: the database, a Kafka cluster, metrics.

Any librdkafka property (SASL, SSL, timeouts) passes through ``-X name=value``, a
properties file (``RELAY_KAFKA_CONFIG_FILE``) or ``RELAY_KAFKA_PROPERTIES`` (``name=value``
pairs separated by ``;``). The relay owns the properties that its guarantees depend on;
setting one of them is an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from relay.runtime.secrets import Secret, mask_properties, mask_url
from relay.settings.properties import (
    check_owned_properties,
    parse_property_pairs,
    read_properties_file,
)
from relay.settings.spec import Given, Invalid, Setting, non_empty, port, seconds, text, whole

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

_EXPECTED_URL = "expected postgresql+psycopg://user:password@host:port/database"


def database_url(url: str) -> Secret:
    """``url`` when it names PostgreSQL through psycopg 3 (``postgresql://`` is taken to
    mean that driver); Invalid otherwise. The refusal never shows the URL."""
    scheme, sep, rest = url.partition("://")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a malformed port raises here)
    except ValueError:
        parts = None
    if not sep or parts is None or not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme, re.I):
        raise Invalid(f"is not a database URL ({_EXPECTED_URL})")
    backend, _, driver = scheme.partition("+")
    if backend != "postgresql":
        raise Invalid(f"must point at PostgreSQL, got {backend!r}")
    if driver not in ("", "psycopg"):
        raise Invalid(f"must use the psycopg driver (postgresql+psycopg://), got {scheme!r}")
    return Secret(f"postgresql+psycopg://{rest}")


def _masked_url(url: Secret) -> str:
    return mask_url(url.reveal())


DATABASE_URL = Setting(
    "database_url",
    "RELAY_DATABASE_URL",
    "--database-url",
    database_url,
    help="PostgreSQL URL",
    metavar="URL",
    secret=True,
    show=_masked_url,
)


def load_database_url(
    flags: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None
) -> Secret:
    """The database URL alone, for commands that need no broker (``relay db``)."""
    url: Secret = Given(flags, environ).required(DATABASE_URL, "database")
    return url


# -- a Kafka cluster's connection ----------------------------------------------------------

_TRANSACTION_TIMEOUT_MS = 60_000
_KAFKA_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Cluster:
    """The settings of one Kafka cluster's connection, and its timeouts."""

    bootstrap_servers: Setting
    properties: Setting
    config_file: Setting
    transaction_timeout_ms: Setting
    kafka_timeout_s: Setting

    @property
    def settings(self) -> tuple[Setting, ...]:
        return (self.bootstrap_servers, self.properties, self.config_file)


def cluster(
    env: str, flag: str, properties_flag: str, what: str, timeouts: tuple[Setting, Setting]
) -> Cluster:
    """A cluster's connection settings: ``<env>BOOTSTRAP_SERVERS``, ``<flag>bootstrap-servers``
    and so on, ``what``: how help names the cluster."""
    return Cluster(
        Setting(
            "bootstrap_servers",
            f"{env}BOOTSTRAP_SERVERS",
            f"{flag}bootstrap-servers",
            text,
            help=f"{what}'s bootstrap servers",
            metavar="HOSTS",
        ),
        Setting(
            "properties",
            f"{env}PROPERTIES",
            properties_flag,
            text,
            help=f"any librdkafka property for {what}, e.g. {properties_flag} "
            "security.protocol=SASL_SSL (repeatable)",
            metavar="NAME=VALUE",
            repeatable=True,
            secret=True,
        ),
        Setting(
            "config_file",
            f"{env}CONFIG_FILE",
            f"{flag}config-file",
            text,
            help=f"librdkafka properties file for {what}, one name=value per line",
            metavar="FILE",
        ),
        *timeouts,
    )


def kafka_timeouts(env: str, transactions: str, clusters: str) -> tuple[Setting, Setting]:
    """``<env>TRANSACTION_TIMEOUT_MS`` (``transactions``: whose) and ``<env>KAFKA_TIMEOUT_S``
    (``clusters``: which it waits for)."""
    return (
        Setting(
            "transaction_timeout_ms",
            f"{env}TRANSACTION_TIMEOUT_MS",
            "--transaction-timeout-ms",
            whole,
            _TRANSACTION_TIMEOUT_MS,
            f"{transactions} transaction.timeout.ms",
            metavar="MS",
        ),
        Setting(
            "kafka_timeout_s",
            f"{env}KAFKA_TIMEOUT_S",
            "--kafka-timeout",
            seconds,
            _KAFKA_TIMEOUT_S,
            f"how long to wait for {clusters} at start-up",
            metavar="SECONDS",
        ),
    )


KAFKA = cluster(
    "RELAY_KAFKA_",
    "--kafka-",
    "-X",
    "the Kafka cluster",
    kafka_timeouts("RELAY_", "Kafka", "the broker"),
)


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    bootstrap_servers: str
    properties: Mapping[str, Secret] = field(default_factory=dict)
    transaction_timeout_ms: int = _TRANSACTION_TIMEOUT_MS
    request_timeout_s: float = _KAFKA_TIMEOUT_S

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

    def summary(self) -> str:
        """:meth:`describe` on one line, safe to log."""
        return ", ".join(f"{k}={v}" for k, v in sorted(self.describe().items()))


def load_kafka_settings(given: Given, spec: Cluster = KAFKA) -> KafkaSettings:
    """One cluster's connection: its bootstrap servers, its properties file, its properties
    variable and its properties flag (which wins)."""
    bootstrap: str = given.required(spec.bootstrap_servers, "Kafka broker")
    properties: dict[str, str] = {}
    if config_file := given.value(spec.config_file):
        properties.update(read_properties_file(config_file))
    pairs = spec.properties
    properties.update(parse_property_pairs((given.environ(pairs) or "").split(";"), pairs.env))
    properties.update(parse_property_pairs(given.value(pairs) or (), pairs.flag or pairs.env))
    check_owned_properties(properties, RELAY_OWNED_PROPERTIES, "the relay")
    return KafkaSettings(
        bootstrap_servers=bootstrap,
        properties={k: Secret(v) for k, v in properties.items()},
        transaction_timeout_ms=given.value(spec.transaction_timeout_ms),
        request_timeout_s=given.value(spec.kafka_timeout_s),
    )


# -- metrics and health: every long-running command's -------------------------------------

ALL_INTERFACES = "0.0.0.0"  # noqa: S104 (metrics and health, for containers; docs/operations.md)

METRICS_PORT = Setting(
    "metrics_port",
    "RELAY_METRICS_PORT",
    "--metrics-port",
    port,
    help="serve Prometheus /metrics, /healthz and /readyz on this port",
    default_doc="off",
    metavar="PORT",
)
METRICS_HOST = Setting(
    "metrics_host",
    "RELAY_METRICS_HOST",
    "--metrics-host",
    non_empty,
    ALL_INTERFACES,
    help="the address to serve them on (0.0.0.0: every interface)",
    metavar="HOST",
)
METRICS = (METRICS_PORT, METRICS_HOST)


def metrics_shown(host: str, port: int | None) -> str:
    """``host:port``, or ``off`` without a port."""
    return f"{host}:{port}" if port else "off"


@dataclass(frozen=True, slots=True)
class Connections:
    """The database and the Kafka cluster: what `relay run`, `relay mirror` and the Spark
    jobs connect to."""

    database_url: Secret
    kafka: KafkaSettings

    def describe(self) -> dict[str, str]:
        return {
            "database_url": DATABASE_URL.shown(self.database_url),
            "kafka": self.kafka.summary(),
        }


CONNECTIONS = (DATABASE_URL, *KAFKA.settings, KAFKA.kafka_timeout_s)
"""The connection flags' group in help (the transaction timeout is the relay's)."""


def load_connections(given: Given) -> Connections:
    return Connections(given.required(DATABASE_URL, "database"), load_kafka_settings(given))
