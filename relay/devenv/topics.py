"""Scratch topics: created with a unique name and ready (every partition has a leader)
before they are used, deleted after."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from relay.devenv.waiting import wait_until


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def create_topic(
    admin: AdminClient,
    name: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> str:
    """Create topic ``name`` and wait until every partition has a leader; returns ``name``."""
    new = NewTopic(
        name, num_partitions=partitions, replication_factor=-1, config=dict(config or {})
    )
    admin.create_topics([new], operation_timeout=30)[name].result(timeout=timeout)
    wait_until(
        lambda: topic_ready(admin, name, partitions),
        timeout,
        f"a leader for every partition of topic {name}",
        interval=0.1,
    )
    return name


def topic_ready(admin: AdminClient, name: str, partitions: int) -> bool:
    """Whether topic ``name`` has ``partitions`` partitions, each with a leader."""
    topic = admin.list_topics(topic=name, timeout=10).topics.get(name)
    return (
        topic is not None
        and topic.error is None
        and len(topic.partitions) == partitions
        and all(p.leader >= 0 for p in topic.partitions.values())
    )


def delete_topics(admin: AdminClient, names: Sequence[str], timeout: float = 30.0) -> None:
    """Delete ``names``, best effort: a leftover uniquely named topic harms nobody."""
    if not names:
        return
    for future in admin.delete_topics(list(names), operation_timeout=timeout).values():
        with contextlib.suppress(KafkaException):
            future.result(timeout=timeout)
