"""The relay as a typed API: start-up checks and running relay partitions.

`relay run` (threads in one process) and the Spark job (one task per relay partition)
both build :class:`~relay.publishing.partition_relay.PartitionRelay` objects here.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from functools import partial

from relay.commands.commit_watch import CommitWatch
from relay.commands.shared_run import CountWatch, PartitionWorkers, poll_until_stopped
from relay.commands.startup import (
    build_partition_relay,
    check_environment,
    for_database,
    refuse_beside_members,
    refuse_mixed_sharing,
    select_partitions,
)
from relay.errors import ConfigurationError, ProducerFencedError, RetriableError
from relay.kafka.member_transactions import MemberTransactions
from relay.kafka.membership import KafkaMembership
from relay.postgres.engine import Database, open_database
from relay.postgres.outbox_partitions import CommittedTops, relay_partitions
from relay.postgres.outbox_status import outbox_status
from relay.publishing.partition_relay import PartitionRelay
from relay.publishing.types import DrainResult, PositionOwner
from relay.runtime.activity import ActivityLog
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.metrics import Backlog, OutboxMetrics
from relay.runtime.retry import RetryPolicy
from relay.runtime.summary import RunSummary
from relay.settings.relay import RelaySettings

log = logging.getLogger(__name__)
_IDLE_TRANSACTION_TIMEOUT_S = 30.0


class ProcessRelay:
    """Runs relay partitions as threads of this process (`relay run`): the ones asked
    for, all of them with ``--once``, or else those the members group gives this
    process (:mod:`relay.commands.shared_run`)."""

    def __init__(
        self,
        settings: RelaySettings,
        partitions: Sequence[int] | None = None,
        *,
        clock: Clock | None = None,
        metrics: OutboxMetrics | None = None,
        summary_every_s: float = 60.0,
    ) -> None:
        self._settings = settings
        self._requested = partitions
        self._alone = ""  # a run of its own: what it is called in a refusal
        self._clock = clock or SystemClock()
        self.stop_event = threading.Event()
        self.metrics = metrics or OutboxMetrics()
        # Each batch is logged at DEBUG; at INFO, what was published every so often.
        self._activity = ActivityLog(
            log, "published", "events", "seq", every_s=summary_every_s, clock=self._clock
        )

    def run(self, once: bool) -> RunSummary[DrainResult]:
        shared = not once and not self._requested
        if self._settings.member_id is not None and not (
            shared and self._settings.process_transactions
        ):
            raise ConfigurationError(
                "--member-id (RELAY_MEMBER_ID) names a member of the positions group: only "
                "`relay run` without --once, --partitions or --partition-transactions joins it"
            )
        try:
            while True:
                summary = self._run_round(once, shared)
                if summary is not None:
                    return summary
                log.info("the relay partition count changed: joining the members group again")
        finally:
            self._activity.flush()

    def _run_round(self, once: bool, shared: bool) -> RunSummary[DrainResult] | None:
        """Start-up checks, then run; None when a sharing process saw the relay partition
        count change (relay db partitions) and must start over with the new count."""
        database = open_database(self._settings.database_url, pool_size=1)
        try:
            count = check_environment(self._settings, database)
            partitions = select_partitions(self._requested, count)
            settings, owner = for_database(self._settings, database)
            if not shared:
                self._alone = "relay run --once" if once else "relay run --partitions"
                refuse_beside_members(settings, self._alone)
            if shared:
                refuse_mixed_sharing(settings)
                log.info(
                    "sharing the %d relay partitions with the other members of group %s",
                    count,
                    settings.group if settings.process_transactions else settings.members_group,
                )
            else:
                log.info(
                    "relaying partitions %s (%s)", partitions, "once" if once else "continuously"
                )
        finally:
            database.dispose()
        # The objects of start-up (modules, settings, clients) live as long as the process:
        # out of the collector's way, a full collection no longer walks them while every
        # partition's thread waits (70-110 ms each, several per 100k rows).
        gc.freeze()
        # A connection for each partition and for the commit watch, kept open: opening one
        # per checkout cost ~10 ms a batch. No ping per checkout: a broken connection is a
        # RetriableError, and the batch is retried.
        database = open_database(
            settings.database_url,
            pool_size=len(partitions) + 1,
            pre_ping=False,
            # A member paused (SIGSTOP, a VM freeze) inside a transaction must not hold up
            # the member that takes its partitions over for longer than this.
            idle_transaction_timeout_s=_IDLE_TRANSACTION_TIMEOUT_S,
        )
        try:
            self.metrics.expect(partitions, partial(backlog, database), shared=shared)
            if shared:
                return self._share_partitions(settings, owner, database, count)
            return self._run_partitions(settings, owner, database, partitions, once)
        finally:
            database.dispose()

    def _share_partitions(
        self, settings: RelaySettings, owner: PositionOwner, database: Database, count: int
    ) -> RunSummary[DrainResult] | None:
        watch = _commit_watch(settings, database, range(count))
        session_s = settings.member_session_timeout_ms / 1000
        transactions: MemberTransactions | None = None
        workers = PartitionWorkers(
            lambda partition, stop: self._run_one(
                partition,
                stop,
                settings=settings,
                owner=owner,
                database=database,
                once=False,
                retry=RetryPolicy(),
                watch=watch,
                transactions=transactions,
            ),
            clock=self._clock,
            retake_after_s=2 * session_s,
            stop_within_s=settings.kafka.transaction_timeout_ms / 1000,
            released=self.metrics.released,
            wake=watch.wake_all,
        )
        membership: KafkaMembership | MemberTransactions
        if settings.process_transactions:
            membership = transactions = MemberTransactions(
                settings, count, assigned=workers.assigned, revoked=workers.revoked
            )
            log.info(
                "one Kafka transaction per cycle for every relay partition held here "
                "(transactional.id %s), fenced by group %s's generation",
                transactions.transactional_id,
                settings.group,
            )
        else:
            membership = KafkaMembership(
                settings, count, assigned=workers.assigned, revoked=workers.revoked
            )
        this_round = threading.Event()  # set when the process stops or the count changed
        watcher = threading.Thread(
            target=watch.run, args=(this_round,), name="relay-watch", daemon=True
        )
        watcher.start()
        membership.join()
        counted = partial(relay_partitions, database)
        try:
            changed = poll_until_stopped(
                membership.poll, workers, self.stop_event, CountWatch(counted, count, self._clock)
            )
        finally:
            this_round.set()
            workers.stop_all()
            membership.close()  # after the last batch: the others take over at once
            watcher.join()
        if changed:
            return None
        return RunSummary(tuple(sorted(workers.results, key=lambda r: r.partition)))

    def _run_partitions(
        self,
        settings: RelaySettings,
        owner: PositionOwner,
        database: Database,
        partitions: list[int],
        once: bool,
    ) -> RunSummary[DrainResult]:
        # A service keeps retrying (a missing topic may be created later); a run that is
        # meant to finish gives up after RELAY_RETRY_ATTEMPTS and says why.
        attempts = settings.retry_attempts if once else None
        retry = RetryPolicy(max_attempts=attempts)
        watch = _commit_watch(settings, database, partitions)
        if once:
            _draw_before_start(database, partitions)
        run_one = partial(
            self._run_one,
            settings=settings,
            owner=owner,
            database=database,
            once=once,
            retry=retry,
            watch=watch,
        )
        with ThreadPoolExecutor(len(partitions) + 1, thread_name_prefix="relay-p") as pool:
            if not once:
                pool.submit(watch.run, self.stop_event)
            futures: list[Future[DrainResult]] = [
                pool.submit(run_one, partition, self.stop_event) for partition in partitions
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
        stop: threading.Event,
        *,
        settings: RelaySettings,
        owner: PositionOwner,
        database: Database,
        once: bool,
        retry: RetryPolicy,
        watch: CommitWatch,
        transactions: MemberTransactions | None = None,
    ) -> DrainResult:
        after_fence: Callable[[], None] | None = None  # a member fences: nothing to check
        if transactions is None:  # beside members of the other kind, or a run of its own
            after_fence = (
                partial(refuse_beside_members, settings, self._alone, fenced=True)
                if self._alone
                else partial(refuse_mixed_sharing, settings)
            )
        relay = build_partition_relay(
            settings,
            owner,
            partition,
            database,
            retry=retry,
            clock=self._clock,
            observer=self.metrics,
            transactions=transactions,
            after_fence=after_fence,
            drawing=once,  # else the commit watch draws
        )
        try:
            if once:
                return relay.drain(stop)
            return self._follow(relay, watch, stop)
        except ProducerFencedError:
            self.metrics.fenced(partition)
            raise
        finally:
            self.metrics.stopped(partition)
            relay.close()

    def _follow(
        self, relay: PartitionRelay, watch: CommitWatch, stop: threading.Event
    ) -> DrainResult:
        while True:  # a service outlives a restarting database or broker
            try:
                relay.start()
                break
            except RetriableError as exc:
                log.warning(
                    "relay partition %d: start-up failed (%s)",
                    relay.partition,
                    exc,
                    extra={"partition": relay.partition},
                )
                self.metrics.retrying(relay.partition)
                if self._clock.wait(self._settings.poll_interval_s * 4, stop):
                    return DrainResult(relay.partition, 0, 0, 0)
        records = batches = 0
        while not stop.is_set():
            result = relay.publish_batch(stop=stop)
            if result is None:
                self._activity.tick()
                relay.keep_alive_if_due(self._settings.position_refresh_s)
                watch.wait(relay.partition, self._settings.poll_interval_s)
                continue
            records += result.records
            batches += 1
            log.debug(
                "relay partition %d: published seq %d..%d (%d records)",
                result.partition,
                result.first_seq,
                result.last_seq,
                result.records,
                extra={"partition": result.partition, "events": result.records},
            )
            self._activity.add(
                f"p{result.partition}", result.records, result.first_seq, result.last_seq
            )
            if not watch.pending(relay.partition, relay.position):  # published all drawn
                watch.wait(relay.partition, self._settings.poll_interval_s)
        return DrainResult(relay.partition, records, batches, relay.position)


def _commit_watch(
    settings: RelaySettings, database: Database, partitions: Iterable[int]
) -> CommitWatch:
    tops = CommittedTops(database)
    return CommitWatch(list(partitions), tops, settings.commit_watch_s, tops.close)


def _draw_before_start(database: Database, partitions: Sequence[int]) -> None:
    """One draw of what has committed before a run's partitions start. Each would draw
    before its first read anyway, one at a time behind the first (a backlog's draw takes a
    second or more per 400,000 rows), and the progress's total counts drawn rows through
    their markers but undrawn ones by hashing every key, per partition. A failure here is
    left to the partitions, which draw before they read and retry."""
    tops = CommittedTops(database)
    try:
        tops(partitions)
    except RetriableError as exc:
        log.warning("drawing the outbox's committed rows before the run failed: %s", exc)
    finally:
        tops.close()


def backlog(database: Database, positions: Mapping[int, int]) -> dict[int, Backlog]:
    """Per relay partition, the rows pending above its position, the oldest one's age and
    the dead letters (the query of `relay status`; the metrics ask it at most every 10 s)."""
    _, found = outbox_status(database, positions)
    return {
        row.partition: Backlog(row.pending, row.dead_letters, row.oldest_pending_age_s)
        for row in found
    }
