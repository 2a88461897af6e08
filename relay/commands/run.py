"""The relay as a typed API: start-up checks and running relay partitions.

`relay run` (threads in one process) and the Spark job (one task per relay partition)
both build :class:`~relay.publishing.partition_relay.PartitionRelay` objects here.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from functools import partial
from typing import TYPE_CHECKING

from relay.commands.commit_watch import CommitWatch
from relay.errors import ConfigurationError, ProducerFencedError, RetriableError
from relay.kafka.admin import admin_client, check_broker, ensure_positions_topic
from relay.kafka.publisher import KafkaTransactionalPublisher
from relay.postgres.engine import database_errors, make_engine
from relay.postgres.migrations import check_schema
from relay.postgres.outbox_source import (
    PostgresOutboxSource,
    committed_tops,
    relay_partitions,
    stranded_rows,
)
from relay.postgres.outbox_status import outbox_status
from relay.publishing.partition_relay import PartitionRelay
from relay.publishing.ports import RelayObserver
from relay.publishing.types import DrainResult, PositionOwner
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.failpoints import Failpoints
from relay.runtime.metrics import Backlog, OutboxMetrics
from relay.runtime.retry import RetryPolicy
from relay.runtime.secrets import Secret
from relay.runtime.summary import RunSummary
from relay.settings.relay import RelaySettings

if TYPE_CHECKING:  # commands use the PostgreSQL adapter's engines, never SQLAlchemy itself
    from sqlalchemy import Engine

log = logging.getLogger(__name__)


def check_environment(settings: RelaySettings, engine: Engine) -> int:
    """Fail fast on an unreachable database or broker, or a schema that is not current.

    Creates the positions topic when it is missing. Returns the relay partition count.
    """
    with database_errors(settings.database_url, "connecting"), engine.connect():
        pass
    check_schema(engine, settings.database_url)
    partitions = relay_partitions(engine, settings.database_url)
    stranded = stranded_rows(engine, settings.database_url, partitions)
    if stranded:
        raise ConfigurationError(
            f"the outbox holds {stranded} rows in relay partitions {partitions} and above, "
            f"beyond the count of {partitions} (outbox_settings.partitions): they would never "
            "be published. Set the count back (relay db partitions N) and publish them first"
        )
    admin = admin_client(settings.kafka)
    check_broker(admin, settings.kafka)
    ensure_positions_topic(
        admin, settings.positions_topic, partitions, settings.kafka.request_timeout_s
    )
    return partitions


def select_partitions(requested: Sequence[int] | None, partitions: int) -> list[int]:
    if not requested:
        return list(range(partitions))
    unknown = sorted(p for p in requested if not 0 <= p < partitions)
    if unknown:
        raise ConfigurationError(
            f"relay partition {unknown[0]} does not exist (the outbox has {partitions}: "
            f"0..{partitions - 1})"
        )
    return sorted(set(requested))


def for_database(settings: RelaySettings, engine: Engine) -> tuple[RelaySettings, PositionOwner]:
    """``settings`` with the prefix and positions group the database chose where unset, and
    the owner every position of these relays carries (read once per run)."""
    identity = PostgresOutboxSource(engine, settings.database_url).identity()
    settings = settings.with_database_defaults(identity.default_prefix)
    return settings, PositionOwner(identity.database_id, settings.prefix)


def build_partition_relay(
    settings: RelaySettings,
    owner: PositionOwner,
    partition: int,
    engine: Engine,
    *,
    retry: RetryPolicy | None = None,
    clock: Clock | None = None,
    observer: RelayObserver | None = None,
) -> PartitionRelay:
    """``settings`` and ``owner`` as :func:`for_database` returns them."""
    return PartitionRelay(
        partition,
        PostgresOutboxSource(engine, settings.database_url),
        KafkaTransactionalPublisher(settings, partition, owner),
        owner=owner,
        batch_size=settings.batch_size,
        batch_bytes=settings.batch_bytes,
        transaction_timeout_s=settings.kafka.transaction_timeout_ms / 1000,
        cleanup=settings.cleanup,
        retry=retry,
        clock=clock,
        failpoints=Failpoints.from_env(),
        observer=observer,
    )


def drain_partition(settings: RelaySettings, partition: int) -> DrainResult:
    """Publish everything committed in one relay partition, then return (a Spark task)."""
    engine = make_engine(
        settings.database_url, application_name="outbox-relay-task", pooled=False, pre_ping=False
    )
    retry = RetryPolicy(max_attempts=settings.retry_attempts)
    settings, owner = for_database(settings, engine)
    relay = build_partition_relay(settings, owner, partition, engine, retry=retry)
    try:
        return relay.drain()
    finally:
        relay.close()
        engine.dispose()


class ProcessRelay:
    """Runs relay partitions as threads of this process (`relay run`)."""

    def __init__(
        self,
        settings: RelaySettings,
        partitions: Sequence[int] | None = None,
        *,
        clock: Clock | None = None,
        metrics: OutboxMetrics | None = None,
    ) -> None:
        self._settings = settings
        self._requested = partitions
        self._clock = clock or SystemClock()
        self.stop_event = threading.Event()
        self.metrics = metrics or OutboxMetrics()

    def run(self, once: bool) -> RunSummary[DrainResult]:
        engine = make_engine(self._settings.database_url, pool_size=1)
        try:
            count = check_environment(self._settings, engine)
            partitions = select_partitions(self._requested, count)
            log.info("relaying partitions %s (%s)", partitions, "once" if once else "continuously")
            settings, owner = for_database(self._settings, engine)
        finally:
            engine.dispose()
        # The objects of start-up (modules, settings, clients) live as long as the process:
        # out of the collector's way, a full collection no longer walks them while every
        # partition's thread waits (70-110 ms each, several per 100k rows).
        gc.freeze()
        # A connection for each partition and for the commit watch, kept open: opening one
        # per checkout cost ~10 ms a batch. No ping per checkout: a broken connection is a
        # RetriableError, and the batch is retried.
        engine = make_engine(settings.database_url, pool_size=len(partitions) + 1, pre_ping=False)
        try:
            self.metrics.expect(partitions, partial(backlog, engine, settings.database_url))
            return self._run_partitions(settings, owner, engine, partitions, once)
        finally:
            engine.dispose()

    def _run_partitions(
        self,
        settings: RelaySettings,
        owner: PositionOwner,
        engine: Engine,
        partitions: list[int],
        once: bool,
    ) -> RunSummary[DrainResult]:
        # A service keeps retrying (a missing topic may be created later); a run that is
        # meant to finish gives up after RELAY_RETRY_ATTEMPTS and says why.
        attempts = settings.retry_attempts if once else None
        retry = RetryPolicy(max_attempts=attempts)
        watch = CommitWatch(
            partitions,
            partial(committed_tops, engine, settings.database_url),
            settings.commit_watch_s,
        )
        run_one = partial(
            self._run_one,
            settings=settings,
            owner=owner,
            engine=engine,
            once=once,
            retry=retry,
            watch=watch,
        )
        with ThreadPoolExecutor(len(partitions) + 1, thread_name_prefix="relay-p") as pool:
            if not once:
                pool.submit(watch.run, self.stop_event)
            futures: list[Future[DrainResult]] = [
                pool.submit(run_one, partition) for partition in partitions
            ]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in done if f.exception() is not None]
            if failed:
                self.stop_event.set()
                watch.wake_all()
                wait(futures)
                error = failed[0].exception()
                if error is not None:
                    raise error
            return RunSummary(tuple(f.result() for f in futures))

    def _run_one(
        self,
        partition: int,
        *,
        settings: RelaySettings,
        owner: PositionOwner,
        engine: Engine,
        once: bool,
        retry: RetryPolicy,
        watch: CommitWatch,
    ) -> DrainResult:
        relay = build_partition_relay(
            settings,
            owner,
            partition,
            engine,
            retry=retry,
            clock=self._clock,
            observer=self.metrics,
        )
        try:
            if once:
                return relay.drain(self.stop_event)
            return self._follow(relay, watch)
        except ProducerFencedError:
            self.metrics.fenced(partition)
            raise
        finally:
            self.metrics.stopped(partition)
            relay.close()

    def _follow(self, relay: PartitionRelay, watch: CommitWatch) -> DrainResult:
        while True:  # a service outlives a restarting database or broker
            try:
                relay.start()
                break
            except RetriableError as exc:
                log.warning("relay partition %d: start-up failed (%s)", relay.partition, exc)
                self.metrics.retrying(relay.partition)
                if self._clock.wait(self._settings.poll_interval_s * 4, self.stop_event):
                    return DrainResult(relay.partition, 0, 0, 0)
        records = batches = 0
        while not self.stop_event.is_set():
            result = relay.publish_batch(stop=self.stop_event)
            if result is None:
                relay.keep_alive_if_due(self._settings.position_refresh_s)
                watch.wait(relay.partition, self._settings.poll_interval_s)
                continue
            records += result.records
            batches += 1
            log.info(
                "relay partition %d: published seq %d..%d (%d records)",
                result.partition,
                result.first_seq,
                result.last_seq,
                result.records,
            )
        return DrainResult(relay.partition, records, batches, relay.position)


def backlog(engine: Engine, url: Secret, positions: Mapping[int, int]) -> dict[int, Backlog]:
    """Per relay partition, the rows pending above its position and the dead letters (the
    query of `relay status`; the metrics ask it at most every 10 s)."""
    _, found = outbox_status(engine, url, positions)
    return {row.partition: Backlog(row.pending, row.dead_letters) for row in found}


def plan_relay_job(settings: RelaySettings, requested: Sequence[int] | None) -> list[int]:
    """The relay partitions the forward Spark job runs as tasks, after the start-up
    checks (the same as ``relay run``'s)."""
    engine = make_engine(settings.database_url, pool_size=1)
    try:
        return select_partitions(requested, check_environment(settings, engine))
    finally:
        engine.dispose()
