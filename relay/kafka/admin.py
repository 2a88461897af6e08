"""Start-up checks and the positions topic."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from relay.config import KafkaSettings
from relay.errors import BrokerUnreachableError, ConfigurationError, KafkaError
from relay.kafka.errors import lib_error


def admin_client(kafka: KafkaSettings) -> AdminClient:
    try:
        return AdminClient(kafka.client_config())
    except KafkaException as exc:
        raise ConfigurationError(f"Kafka configuration rejected: {_reason(exc)}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"Kafka configuration rejected: {exc}") from None


def _reason(exc: KafkaException) -> str:
    err = lib_error(exc)
    return err.str() if err is not None else str(exc)


def check_broker(admin: AdminClient, kafka: KafkaSettings) -> None:
    """Fail fast with one clear message when no broker answers."""
    try:
        admin.list_topics(timeout=kafka.request_timeout_s)
    except KafkaException as exc:
        raise BrokerUnreachableError(
            f"no Kafka broker answered at {kafka.bootstrap_servers} within "
            f"{kafka.request_timeout_s:g} s ({_reason(exc)})"
        ) from None


def topic_partitions(admin: AdminClient, topic: str, timeout: float) -> int | None:
    """How many partitions ``topic`` has; None when it does not exist."""
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise KafkaError(f"cannot read metadata of topic {topic}: {_reason(exc)}") from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return None
    return len(found.partitions)


def ensure_positions_topic(admin: AdminClient, topic: str, partitions: int, timeout: float) -> None:
    """Create the positions topic (one Kafka partition per relay partition) if needed.

    Kafka stores committed offsets only for partitions that exist; the relay commits
    each relay partition's position as the offset of the partition with its number.
    """
    existing = topic_partitions(admin, topic, timeout)
    if existing is None:
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=-1)],
            request_timeout=timeout,
        )
        try:
            futures[topic].result(timeout)
        except KafkaException as exc:
            err = lib_error(exc)
            if err is None or err.code() != err.TOPIC_ALREADY_EXISTS:
                raise KafkaError(f"cannot create positions topic {topic}: {_reason(exc)}") from None
        existing = topic_partitions(admin, topic, timeout) or partitions
    if existing < partitions:
        raise ConfigurationError(
            f"positions topic {topic} has {existing} partitions but the outbox has {partitions} "
            f"relay partitions; add partitions to it (kafka-topics --alter --partitions "
            f"{partitions}) or use another RELAY_POSITIONS_TOPIC"
        )
