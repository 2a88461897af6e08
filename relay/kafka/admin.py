"""Start-up checks, the positions topic, and what the mirror asks about its topics."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from confluent_kafka import ConsumerGroupState, KafkaException, TopicCollection
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions, NewTopic

from relay.errors import (
    BrokerUnreachableError,
    ConfigurationError,
    KafkaAuthenticationError,
    KafkaError,
    RetriableError,
)
from relay.kafka.errors import kafka_reason, lib_error, translate
from relay.mirroring.types import TopicIdentity
from relay.runtime.clock import Deadline
from relay.runtime.logs import LIBRDKAFKA_LOGGER
from relay.runtime.secrets import is_sensitive_property, mask_text
from relay.settings.connections import KafkaSettings

_log = logging.getLogger(LIBRDKAFKA_LOGGER)


def admin_client(kafka: KafkaSettings, **extra: Any) -> AdminClient:
    """An AdminClient for ``kafka``; ``extra`` adds or replaces client arguments
    (``error_cb``, ``logger``)."""
    # logger: librdkafka's lines go through logging (and its secret filter), not stderr.
    arguments: dict[str, Any] = {"logger": _log, **extra}
    try:
        return AdminClient(kafka.client_config(), **arguments)
    except KafkaException as exc:
        raise ConfigurationError(f"Kafka configuration rejected: {kafka_reason(exc)}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"Kafka configuration rejected: {exc}") from None


# librdkafka reports a refused login only to error_cb (a metadata request just times out):
# these codes end the start-up check at once.
_AUTHENTICATION_CODES = frozenset(
    {LibKafkaError._AUTHENTICATION, LibKafkaError.SASL_AUTHENTICATION_FAILED}
)
_PROBE_SLICE_S = 0.5
_BROKER_PREFIX = re.compile(r"^\S+://\S+: ")
_TIMING_SUFFIX = re.compile(r" \(after \d+ms in state \w+\)$")


class _DebugLog:
    """Sends the probe's librdkafka log lines to DEBUG: the check reports the outcome."""

    def log(self, level: int, msg: str, *args: object) -> None:
        _log.debug(msg, *args)


def check_broker(admin: AdminClient, kafka: KafkaSettings) -> None:
    """Fail fast with one clear message when no broker answers or it refuses the login.

    A probe client (whose error callback sees authentication failures) asks for metadata
    in short slices until ``request_timeout_s``; then ``admin`` must answer too."""
    refused: list[LibKafkaError] = []

    def on_error(err: LibKafkaError) -> None:
        if err.code() in _AUTHENTICATION_CODES:
            refused.append(err)

    probe = admin_client(kafka, error_cb=on_error, logger=_DebugLog())
    deadline = Deadline(kafka.request_timeout_s)
    while True:
        try:
            probe.list_topics(timeout=max(0.05, min(_PROBE_SLICE_S, deadline.remaining())))
            break
        except KafkaException as exc:
            last = exc
        probe.poll(0)
        if refused:
            raise KafkaAuthenticationError(
                f"Kafka authentication failed at {kafka.bootstrap_servers}: "
                f"{_auth_reason(refused[0], kafka)} (check security.protocol, sasl.mechanism, "
                "sasl.username and sasl.password)",
                code=refused[0].name(),
            )
        if deadline.expired():
            raise BrokerUnreachableError(
                f"no Kafka broker answered at {kafka.bootstrap_servers} within "
                f"{kafka.request_timeout_s:g} s ({kafka_reason(last)})"
            )
    try:
        admin.list_topics(timeout=max(1.0, deadline.remaining()))
    except KafkaException as exc:
        raise BrokerUnreachableError(
            f"no Kafka broker answered at {kafka.bootstrap_servers} within "
            f"{kafka.request_timeout_s:g} s ({kafka_reason(exc)})"
        ) from None


def _auth_reason(err: LibKafkaError, kafka: KafkaSettings) -> str:
    """librdkafka's text without the broker prefix and timing, secrets masked."""
    text = _TIMING_SUFFIX.sub("", _BROKER_PREFIX.sub("", err.str()))
    secrets = tuple(v.reveal() for k, v in kafka.properties.items() if is_sensitive_property(k))
    return mask_text(text, secrets)


def topic_partitions(admin: AdminClient, topic: str, timeout: float) -> int | None:
    """How many partitions ``topic`` has; None when it does not exist."""
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise KafkaError(f"cannot read metadata of topic {topic}: {kafka_reason(exc)}") from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return None
    return len(found.partitions)


def describe_topics(
    admin: AdminClient, topics: Sequence[str], timeout: float
) -> dict[str, TopicIdentity | None]:
    """Each topic's id (Kafka's base64 form) and partition count; None when it does not
    exist. RetriableError when Kafka does not answer."""
    if not topics:
        return {}
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout)
    found: dict[str, TopicIdentity | None] = {}
    for topic in topics:
        try:
            description = futures[topic].result(timeout)
        except KafkaException as exc:
            err = lib_error(exc)
            if err is not None and err.code() == LibKafkaError.UNKNOWN_TOPIC_OR_PART:
                found[topic] = None
                continue
            raise RetriableError(f"describing topic {topic} failed: {kafka_reason(exc)}") from None
        found[topic] = TopicIdentity(str(description.topic_id), len(description.partitions))
    return found


class KafkaTopicDirectory:
    """Implements :class:`relay.mirroring.ports.TopicDirectory` with an AdminClient."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._admin = admin_client(kafka)
        self._timeout = kafka.request_timeout_s

    def describe(self, topics: Sequence[str]) -> dict[str, TopicIdentity]:
        result: dict[str, TopicIdentity] = {}
        for topic, identity in describe_topics(self._admin, topics, self._timeout).items():
            if identity is None:
                raise KafkaError(f"topic {topic} does not exist in Kafka (deleted while mirrored?)")
            result[topic] = identity
        return result


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
                raise KafkaError(
                    f"cannot create positions topic {topic}: {kafka_reason(exc)}"
                ) from None
        existing = topic_partitions(admin, topic, timeout) or partitions
    if existing < partitions:  # the relay partition count was raised (relay db partitions)
        grown = admin.create_partitions([NewPartitions(topic, partitions)], request_timeout=timeout)
        try:
            grown[topic].result(timeout)
        except KafkaException as exc:
            raise KafkaError(
                f"positions topic {topic} has {existing} partitions, the outbox has "
                f"{partitions} relay partitions, and adding partitions failed: "
                f"{kafka_reason(exc)}"
            ) from None


_INACTIVE = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)


def group_members(admin: AdminClient, group: str, timeout: float, where: str) -> int:
    """How many active members consumer group ``group`` has (0: none, or no such group);
    ``where`` names the cluster in an error.

    The groups' listing (one request per broker) says whether ``group`` has members; only
    then is it described (a request to its coordinator) for how many. librdkafka aborts
    the process when a coordinator request cannot be sent because the coordinator's
    connection dropped (confluentinc/librdkafka#4605), and these checks run after
    failures too, when that is likely: a group without members is never described."""
    try:
        listing = admin.list_consumer_groups(request_timeout=timeout).result()
    except KafkaException as exc:
        raise translate(exc, f"listing the consumer groups on the {where}") from None
    states = [g.state for g in listing.valid or () if g.group_id == group]
    if not states and listing.errors:  # a broker did not answer: it may hold the group
        raise translate(listing.errors[0], f"listing the consumer groups on the {where}")
    if all(state in _INACTIVE for state in states):
        return 0
    try:
        futures = admin.describe_consumer_groups([group], request_timeout=timeout)
        description = futures[group].result()
    except KafkaException as exc:
        err = lib_error(exc)
        if err is not None and err.code() == LibKafkaError.GROUP_ID_NOT_FOUND:
            return 0
        raise translate(exc, f"describing group {group} on the {where}") from None
    return len(description.members or ())
