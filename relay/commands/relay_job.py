"""The forward Spark job's steps (jobs/outbox_relay.py, relay.spark.outbox_relay): on the
driver, the relay partitions to run as tasks after `relay run`'s start-up checks; in each
task, one relay partition drained."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from relay.commands.startup import (
    build_partition_relay,
    check_environment,
    for_database,
    refuse_beside_members,
    select_partitions,
)
from relay.postgres.engine import open_database
from relay.publishing.types import DrainResult
from relay.runtime.retry import RetryPolicy
from relay.settings.relay import RelaySettings


def plan_relay_job(settings: RelaySettings, requested: Sequence[int] | None) -> list[int]:
    """The relay partitions the forward Spark job runs as tasks, after the start-up
    checks (the same as ``relay run``'s)."""
    database = open_database(settings.database_url, pool_size=1)
    try:
        partitions = select_partitions(requested, check_environment(settings, database))
        refuse_beside_members(for_database(settings, database)[0], "the outbox Spark job")
        return partitions
    finally:
        database.dispose()


def drain_partition(settings: RelaySettings, partition: int) -> DrainResult:
    """Publish everything committed in one relay partition, then return (a Spark task)."""
    database = open_database(
        settings.database_url, application_name="outbox-relay-task", pooled=False, pre_ping=False
    )
    retry = RetryPolicy(max_attempts=settings.retry_attempts)
    settings, owner = for_database(settings, database)
    relay = build_partition_relay(
        settings,
        owner,
        partition,
        database,
        retry=retry,
        after_fence=partial(refuse_beside_members, settings, "the outbox Spark job", fenced=True),
    )
    try:
        return relay.drain()
    finally:
        relay.close()
        database.dispose()
