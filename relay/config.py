"""Typed relay settings, read from ``RELAY_*`` environment variables and CLI flags.

Every setting has an environment variable; the CLI flag of the same name wins over it.
Any librdkafka property (SASL, SSL, timeouts) passes through ``-X name=value``, a
properties file (``RELAY_KAFKA_CONFIG_FILE``) or ``RELAY_KAFKA_PROPERTIES``
(``name=value`` pairs separated by ``;``). The relay owns the properties that its
guarantees depend on; setting one of them is an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from relay.errors import ConfigurationError
from relay.secrets import Secret, mask_properties, mask_url

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

ENV_PREFIX = "RELAY_"


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
    transactional_id_prefix: str = "outbox-relay"
    positions_topic: str = "outbox-relay-positions"
    positions_group: str = "outbox-relay-positions"
    batch_size: int = 5000
    poll_interval_s: float = 0.5
    cleanup: bool = True
    retry_attempts: int = 8

    def transactional_id(self, partition: int) -> str:
        return f"{self.transactional_id_prefix}-{partition}"

    def describe(self) -> dict[str, str]:
        """The settings as text that is safe to log."""
        return {
            "database_url": mask_url(self.database_url.reveal()),
            "kafka": ", ".join(f"{k}={v}" for k, v in sorted(self.kafka.describe().items())),
            "transactional_id_prefix": self.transactional_id_prefix,
            "positions_topic": self.positions_topic,
            "positions_group": self.positions_group,
            "batch_size": str(self.batch_size),
            "poll_interval_s": str(self.poll_interval_s),
            "cleanup": str(self.cleanup),
            "retry_attempts": str(self.retry_attempts),
        }

    def with_overrides(self, **changes: object) -> RelaySettings:
        return replace(self, **changes)  # type: ignore[arg-type]


def parse_property_pairs(pairs: Iterable[str], source: str) -> dict[str, str]:
    """``name=value`` strings as a dict; a malformed pair is a ConfigurationError."""
    result: dict[str, str] = {}
    for raw in pairs:
        pair = raw.strip()
        if not pair or pair.startswith("#"):
            continue
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            # Never echo more than the leading property name: the rest may be a secret.
            leading = re.match(r"[\w.-]*", pair)
            shown = f"{leading[0] if leading else ''}..."
            raise ConfigurationError(
                f"{source}: expected a Kafka property as name=value, got {shown!r}"
            )
        result[name] = value.strip()
    return result


def read_properties_file(path: str) -> dict[str, str]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read Kafka properties file {path}: {exc.strerror}"
        ) from exc
    return parse_property_pairs(lines, source=path)


def check_kafka_properties(
    names: Collection[str],
    owned_properties: frozenset[str] = RELAY_OWNED_PROPERTIES,
    owner: str = "the relay",
) -> None:
    """A ConfigurationError when ``names`` sets a property that ``owner`` sets itself."""
    owned = sorted(set(names) & owned_properties)
    if owned:
        raise ConfigurationError(
            f"Kafka property {owned[0]!r} is set by {owner} itself and cannot be overridden"
            + (" (use --kafka-bootstrap-servers)" if owned[0] == "bootstrap.servers" else "")
        )


def _positive_int(name: str, raw: str | int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return value


def _positive_float(name: str, raw: str | float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return value


def _bool(name: str, raw: str | bool) -> bool:
    if isinstance(raw, bool):
        return raw
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigurationError(f"{name} must be true or false, got {raw!r}")


def check_database_url(url: str) -> str:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigurationError(
            "RELAY_DATABASE_URL is not a database URL "
            "(expected postgresql+psycopg://user:password@host:port/database)"
        ) from None
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(
            f"RELAY_DATABASE_URL must point at PostgreSQL, got {parsed.get_backend_name()!r}"
        )
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif parsed.drivername != "postgresql+psycopg":
        raise ConfigurationError(
            f"RELAY_DATABASE_URL must use the psycopg driver (postgresql+psycopg://), "
            f"got {parsed.drivername!r}"
        )
    return parsed.render_as_string(hide_password=False)


def load_settings(
    overrides: Mapping[str, object] | None = None,
    kafka_pairs: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> RelaySettings:
    """Settings from the environment, with CLI ``overrides`` (None values ignored) on top."""
    env = os.environ if environ is None else environ
    given = {k: v for k, v in (overrides or {}).items() if v is not None}

    def pick(name: str) -> object | None:
        if name in given:
            return given[name]
        return env.get(ENV_PREFIX + name.upper())

    database_url = pick("database_url")
    if not database_url:
        raise ConfigurationError("no database: set RELAY_DATABASE_URL or --database-url")
    bootstrap = pick("kafka_bootstrap_servers")
    if not bootstrap:
        raise ConfigurationError(
            "no Kafka broker: set RELAY_KAFKA_BOOTSTRAP_SERVERS or --kafka-bootstrap-servers"
        )

    properties: dict[str, str] = {}
    config_file = pick("kafka_config_file")
    if config_file:
        properties.update(read_properties_file(str(config_file)))
    env_pairs = env.get(ENV_PREFIX + "KAFKA_PROPERTIES", "")
    properties.update(parse_property_pairs(env_pairs.split(";"), "RELAY_KAFKA_PROPERTIES"))
    properties.update(parse_property_pairs(kafka_pairs, "-X"))
    check_kafka_properties(properties)

    kafka = KafkaSettings(
        bootstrap_servers=str(bootstrap),
        properties={k: Secret(v) for k, v in properties.items()},
        transaction_timeout_ms=_positive_int(
            "RELAY_TRANSACTION_TIMEOUT_MS", str(pick("transaction_timeout_ms") or 60_000)
        ),
        request_timeout_s=_positive_float(
            "RELAY_KAFKA_TIMEOUT_S", str(pick("kafka_timeout_s") or 15.0)
        ),
    )
    settings = RelaySettings(
        database_url=Secret(check_database_url(str(database_url))),
        kafka=kafka,
    )
    changes: dict[str, object] = {}
    for name in ("transactional_id_prefix", "positions_topic", "positions_group"):
        value = pick(name)
        if value is not None:
            if not str(value).strip():
                raise ConfigurationError(f"RELAY_{name.upper()} must not be empty")
            changes[name] = str(value)
    if (value := pick("batch_size")) is not None:
        changes["batch_size"] = _positive_int("RELAY_BATCH_SIZE", str(value))
    if (value := pick("retry_attempts")) is not None:
        changes["retry_attempts"] = _positive_int("RELAY_RETRY_ATTEMPTS", str(value))
    if (value := pick("poll_interval_s")) is not None:
        changes["poll_interval_s"] = _positive_float("RELAY_POLL_INTERVAL_S", str(value))
    if (value := pick("cleanup")) is not None:
        changes["cleanup"] = _bool("RELAY_CLEANUP", value)  # type: ignore[arg-type]
    return replace(settings, **changes)  # type: ignore[arg-type]
