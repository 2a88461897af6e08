"""The replicator as a typed API: `relay replicate` and the Spark job's steps.

`relay replicate` runs each source partition's
:class:`~relay.replication.partition_replicator.PartitionReplicator` as a thread of this
process (with ``--once`` all of them; else those the members group gives this instance,
:mod:`relay.commands.replicate_shared`); the Spark job (``jobs/replicate.py``) runs
each as a task. Both plan the topics here first (:func:`plan_replication`): the
selected source topics, their target topics created or grown, and the name the
provenance headers and positions give the source.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import partial

from relay.commands.group_sync import GroupSync
from relay.commands.groups import replicate_settings
from relay.commands.replicate_shared import refuse_beside_members, share_routes
from relay.errors import RelayError, RetriableError
from relay.kafka.replica_copies import KafkaTopicIds
from relay.kafka.replica_reader import KafkaSourceReader, last_stable_offsets
from relay.kafka.replica_topics import ReplicatedTopic, TopicPlanner
from relay.kafka.replica_writer import KafkaReplicaWriter
from relay.replication.batch_check import check_pool
from relay.replication.partition_replicator import PartitionReplicator
from relay.replication.ports import ReplicaObserver, TopicIds
from relay.replication.types import Origin, PositionStamp, ReplicaResult, Route
from relay.runtime.activity import ActivityLog
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.failpoints import Failpoints
from relay.runtime.metrics import ReplicaMetrics
from relay.runtime.retry import RetryPolicy
from relay.runtime.summary import RunSummary
from relay.settings.replicate import ReplicateSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplicaTask:
    """One source partition to copy: a thread of `relay replicate` or a Spark task."""

    route: Route
    source_alias: str
    max_message_bytes: int
    group: str  # on the target: the positions (the default resolved by the plan)
    end_offset: int | None = None  # copy up to here (--once, Spark); None: follow
    cluster_id: str | None = None  # the source cluster's id, in the positions' stamps
    compression: str = "lz4"  # the target producer's compression.type


@dataclass(frozen=True, slots=True)
class ReplicationPlan:
    source_alias: str
    topics: tuple[ReplicatedTopic, ...]
    group: str  # the replicator's group: as given, or the default (relay.commands.groups)
    cluster_id: str | None = None  # the source cluster's
    compression: str = "source"  # --target-compression

    def tasks(self) -> list[ReplicaTask]:
        return [
            ReplicaTask(
                Route(t.topic, p, t.target_topic),
                self.source_alias,
                t.max_message_bytes,
                self.group,
                cluster_id=self.cluster_id,
                compression=t.compression(self.compression),
            )
            for t in self.topics
            for p in range(t.partitions)
        ]


def plan_replication(settings: ReplicateSettings, *, strict: bool = True) -> ReplicationPlan:
    """The selected source topics, with their target topics created or grown to fit, and
    the group (the default resolved once, at start-up: ``strict``)."""
    if strict:  # at start-up
        TopicPlanner(settings).check_clusters()
    settings = replicate_settings(settings, announce=strict)
    planner = TopicPlanner(settings)
    cluster_id = planner.cluster_ids()[0]
    return ReplicationPlan(
        settings.source_alias or cluster_id,
        tuple(planner.plan(strict=strict)),
        settings.group,
        cluster_id,
        settings.target_compression,
    )


def build_partition_replicator(
    settings: ReplicateSettings,
    task: ReplicaTask,
    *,
    retry: RetryPolicy,
    clock: Clock | None = None,
    observer: ReplicaObserver | None = None,
    ids: TopicIds | None = None,
    checks: Executor | None = None,
) -> PartitionReplicator:
    origin = Origin(task.source_alias, task.route.topic)
    reader = KafkaSourceReader(settings, task.route)
    try:
        writer = KafkaReplicaWriter(
            settings, task.route, origin, task.max_message_bytes, task.compression
        )
        ids = ids or KafkaTopicIds(settings, clock)
    except RelayError:
        reader.close()
        raise
    return PartitionReplicator(
        task.route,
        reader,
        writer,
        origin=origin,
        batch_size=settings.batch_size,
        batch_bytes=settings.batch_bytes,
        transaction_timeout_s=settings.target.transaction_timeout_ms / 1000,
        retry=retry,
        clock=clock,
        failpoints=Failpoints.from_env(),
        observer=observer,
        ids=ids,
        owner=PositionStamp(origin, task.cluster_id, prefix=settings.prefix),
        heartbeat_s=settings.heartbeat_interval_s,
        checks=checks,
    )


def with_end_offsets(
    settings: ReplicateSettings, tasks: Sequence[ReplicaTask]
) -> list[ReplicaTask]:
    """``tasks`` with each source partition's last stable offset now: what a run that
    copies everything committed so far copies up to (the Spark driver's step)."""
    if not tasks:
        return []
    settings = settings.with_group(tasks[0].group)  # as the plan resolved it
    ends = last_stable_offsets(settings, [(t.route.topic, t.route.partition) for t in tasks])
    return [
        replace(task, end_offset=ends[(task.route.topic, task.route.partition)]) for task in tasks
    ]


def replicate_partition(settings: ReplicateSettings, task: ReplicaTask) -> ReplicaResult:
    """Copy one source partition up to ``task.end_offset``, then return (a Spark task)."""
    if task.end_offset is None:
        raise ValueError("a Spark task copies up to an end offset")
    settings = settings.with_group(task.group)  # as the driver resolved it
    replicator = build_partition_replicator(
        settings, task, retry=RetryPolicy(max_attempts=settings.retry_attempts)
    )
    try:
        return replicator.drain(task.end_offset)
    finally:
        replicator.close()


class ReplicateService:
    """Copies the selected topics' partitions as threads of this process: all of them up
    to the source's last stable offsets when it started (``once``), or for as long as it
    runs those the members group gives it, picking up new topics and partitions every
    ``topic_refresh_s``."""

    def __init__(
        self,
        settings: ReplicateSettings,
        *,
        clock: Clock | None = None,
        metrics: ReplicaMetrics | None = None,
        summary_every_s: float = 60.0,
    ) -> None:
        self._settings = settings
        self._clock = clock or SystemClock()
        self.metrics = metrics or ReplicaMetrics()
        self.stop_event = threading.Event()
        self._ids: KafkaTopicIds | None = None  # shared by the partitions (built once)
        self._checks: ThreadPoolExecutor | None = None  # their batch checks' threads
        # Each batch is logged at DEBUG; at INFO, what was copied every so often.
        self._activity = ActivityLog(
            log, "copied", "records", "offsets", every_s=summary_every_s, clock=self._clock
        )

    def run(self, once: bool) -> RunSummary[ReplicaResult]:
        plan = plan_replication(self._settings)
        self._settings = self._settings.with_group(plan.group)
        self._ids = KafkaTopicIds(self._settings, self._clock)
        self.metrics.started(partial(last_stable_offsets, self._settings))
        if not plan.topics:
            log.warning("no source topic matches %s yet", self._settings.selection.describe())
        log.info(
            "replicating %s from source %r (%s)",
            ", ".join(f"{t.topic} -> {t.target_topic}" for t in plan.topics) or "nothing",
            plan.source_alias,
            "once" if once else "continuously",
        )
        sync = None
        if self._settings.sync_groups:
            sync = GroupSync(self._settings, self.metrics, self._clock)
        self._checks = checks = check_pool(len(plan.tasks()))  # threads start as needed
        try:
            if once:
                summary = self._run_once(plan)
                if sync is not None:  # what was copied is there: the groups' offsets too
                    sync.sync_once()
                return summary
            if sync is not None:
                sync.start(self.stop_event)
            return self._follow(plan)
        finally:
            self.stop_event.set()
            self._activity.flush()
            if sync is not None:
                sync.close()  # after its round
            checks.shutdown(wait=False, cancel_futures=True)  # after the partitions' end

    def _run_once(self, plan: ReplicationPlan) -> RunSummary[ReplicaResult]:
        refuse_beside_members(self._settings, "relay replicate --once")
        retry = RetryPolicy(max_attempts=self._settings.retry_attempts)
        tasks = with_end_offsets(self._settings, plan.tasks())
        replicators = [self._build(task, retry) for task in tasks]
        try:
            with ThreadPoolExecutor(max(1, len(tasks)), thread_name_prefix="replicate") as pool:
                futures = [
                    pool.submit(self._drain, replicator, task)
                    for replicator, task in zip(replicators, tasks, strict=True)
                ]
                return RunSummary(tuple(self._results(futures)))
        finally:
            for replicator in replicators:
                replicator.close()

    def _build(self, task: ReplicaTask, retry: RetryPolicy) -> PartitionReplicator:
        self.metrics.expect(task.route.topic, task.route.partition)
        return build_partition_replicator(
            self._settings,
            task,
            retry=retry,
            clock=self._clock,
            observer=self.metrics,
            ids=self._ids,
            checks=self._checks,
        )

    def _drain(self, replicator: PartitionReplicator, task: ReplicaTask) -> ReplicaResult:
        end, route = task.end_offset or 0, task.route
        try:
            start = replicator.start_retrying(self.stop_event)
            if start is None:  # stopped
                return _result(route, 0, 0, 0)
            self.metrics.to_copy(route.topic, route.partition, max(0, end - start))
            return replicator.drain(end, self._settings.max_wait_s * 10, self.stop_event)
        finally:
            self.metrics.stopped(route.topic, route.partition)

    def _results(self, futures: list[Future[ReplicaResult]]) -> list[ReplicaResult]:
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in done if f.exception() is not None]
        if failed:
            self.stop_event.set()
            wait(futures)
            error = failed[0].exception()
            if error is not None:
                raise error
        return [f.result() for f in futures]

    def _follow(self, plan: ReplicationPlan) -> RunSummary[ReplicaResult]:
        retry = RetryPolicy()  # a service retries for ever
        planned = [plan]
        tasks = {task.route: task for task in plan.tasks()}  # every route planned so far

        def replan() -> None:
            planned[0] = self._replan(planned[0])
            tasks.update((task.route, task) for task in planned[0].tasks())

        results = share_routes(
            self._settings,
            routes=lambda: [task.route for task in planned[0].tasks()],
            replan=replan,
            copy=lambda route, stop: self._copy(tasks[route], retry, stop),
            released=lambda route: self.metrics.released(route.topic, route.partition),
            clock=self._clock,
            stop=self.stop_event,
        )
        return RunSummary(tuple(results))

    def _replan(self, plan: ReplicationPlan) -> ReplicationPlan:
        try:
            found = plan_replication(self._settings, strict=False)
        except RetriableError as exc:
            log.warning("looking for new topics and partitions failed (%s)", exc)
            return plan
        known = {task.route for task in plan.tasks()}
        for task in found.tasks():
            if task.route not in known:
                log.info(
                    "%s: new source partition, copying it to %s",
                    task.route,
                    task.route.target_topic,
                )
        return found

    def _copy(self, task: ReplicaTask, retry: RetryPolicy, stop: threading.Event) -> ReplicaResult:
        replicator = self._build(task, retry)
        try:
            # A service outlives a restarting broker on either side (retry without end).
            if replicator.start_retrying(stop) is None:
                return _result(task.route, 0, 0, 0)
            records = batches = 0
            while not stop.is_set():
                batch = replicator.copy_batch(None, self._settings.max_wait_s, stop)
                if batch is None:
                    self._activity.tick()
                    replicator.keep_alive_if_due(self._settings.position_refresh_s)
                    continue
                records += batch.records
                batches += 1
                log.debug(
                    "%s: copied offsets %d..%d (%d records)",
                    task.route,
                    batch.first_offset,
                    batch.next_offset - 1,
                    batch.records,
                )
                self._activity.add(
                    str(task.route), batch.records, batch.first_offset, batch.next_offset - 1
                )
            return _result(task.route, records, batches, replicator.next_offset)
        finally:
            self.metrics.stopped(task.route.topic, task.route.partition)
            replicator.close()


def _result(route: Route, records: int, batches: int, next_offset: int) -> ReplicaResult:
    return ReplicaResult(
        route.topic, route.partition, route.target_topic, records, batches, next_offset
    )
