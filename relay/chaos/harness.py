"""`relay chaos`: workload, faults and the independent checker in one run.

1. start a PostgreSQL server and a Kafka broker of the run's own (never the shared ones),
   and the broker of a second Kafka cluster when the run replicates; migrate, create the
   workload's tables and topic;
2. start the processes under test: a continuous ``relay run``, two ``relay mirror``
   consumers of one group, a continuous ``relay replicate`` of the topic to the second
   cluster, and now and then a run of the relay's and of the mirror's Spark job; a
   supervisor restarts whatever exits;
3. start the writers, then inject the planned faults, bounded in count and time;
4. stop the writers and the processes, drain with ``relay run --once``, ``relay mirror
   --once`` and ``relay replicate --once``, then run the checker and stop the servers.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from sqlalchemy import create_engine

from relay import devenv
from relay.chaos import preparation
from relay.chaos.checker_inputs import KafkaAccess, ReplicaAccess, run_check
from relay.chaos.config import ChaosConfig
from relay.chaos.drain import drain
from relay.chaos.faults import FaultContext, plan_faults
from relay.chaos.ingest import IngestWriter
from relay.chaos.injector import FaultInjector, FaultLog
from relay.chaos.names import HISTORY, MIRROR, FaultKind
from relay.chaos.processes import Supervisor
from relay.chaos.replica_ops import ReplicaOperations
from relay.chaos.report import ChaosReport
from relay.chaos.workload import Workload
from relay.devenv.private import PrivateServers, remove_workdir, start_servers, stop_servers
from relay.postgres.migrations import PROJECT_ROOT
from relay.runtime.clock import Clock

# How long the long-running processes may take to be running again after the last fault.
RECOVERY_S = 30.0
# A server restarted after a kill -9 recovers its logs first: a broker that held many
# transactions and group offsets took over 120 s on a busy 2-core machine.
SERVER_RESTART_TIMEOUT_S = 300.0


class ChaosRun:
    def __init__(
        self,
        config: ChaosConfig,
        emit: Callable[[str], None],
        clock: Clock,
        now: Callable[[], datetime],
    ) -> None:
        self._config = config
        self._emit = emit
        self._clock = clock
        self._now = now
        self._rng = random.Random(f"chaos/{config.seed}")

    def run(self) -> ChaosReport:
        config = self._config
        started = self._clock.monotonic()
        stamp = self._now().strftime("%Y%m%dT%H%M%S")
        workdir = config.workdir or PROJECT_ROOT / ".relay-dev" / "chaos" / f"run-{stamp}"
        workdir = workdir.absolute()
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        self._emit(f"chaos: seed {config.seed}, {config.faults} faults, workdir {workdir}")
        ok = False
        try:
            # stopped below even if only some came up
            servers = start_servers(workdir, target=config.replicate)
            second = servers.target_bootstrap_servers
            self._emit(
                f"chaos: own servers up: PostgreSQL 127.0.0.1:{servers.ports.postgres}, "
                f"Kafka {servers.bootstrap_servers}"
                + (f", second Kafka cluster {second}" if second else "")
            )
            report = self._run_with(servers, workdir, started)
            ok = report.ok
            return report
        finally:
            stop_servers(workdir)
            if ok and not config.keep_workdir:
                # keep faults.jsonl; the servers' data and the process logs go
                remove_workdir(workdir / "pg")
                for name in ("kafka", "kafka-target", "kafka-libs", "logs", "traps"):
                    shutil.rmtree(workdir / name, ignore_errors=True)

    def _run_with(self, servers: PrivateServers, workdir: Path, started: float) -> ChaosReport:
        config = self._config
        env = preparation.Environment.create(servers, workdir, config, self._rng)
        engine = create_engine(
            servers.database_url,
            pool_size=config.workload.writers + 2,
            pool_pre_ping=True,
            connect_args={"connect_timeout": 5},
        )
        try:
            preparation.prepare(env, engine, config)
            supervisor = Supervisor(workdir / "logs", self._clock)
            preparation.add_slots(supervisor, env, config, self._rng)
            plan = plan_faults(config.faults, config.fault_kinds, self._rng)
            log_file = FaultLog(workdir / "faults.jsonl", self._emit, self._now)
            workload = Workload(engine, env.topic, config.workload, config.seed, self._clock)
            ops = self._operations(env, supervisor)
            try:
                supervisor.start()
                workload.start()
                if ops is not None and ops.ingest is not None:
                    ops.ingest.start()
                self._emit("chaos: writers and processes under test started")
                self._clock.wait(config.warmup_s)
                self._inject(plan, supervisor, env, log_file, ops)
            finally:
                workload.stop()
                if ops is not None and ops.ingest is not None:
                    ops.ingest.stop()
                    self._emit(f"chaos: {env.ingest_topic}: {ops.ingest.describe()}")
                supervisor.shutdown()
                log_file.close()
            self._emit("chaos: writers stopped; draining with relay run --once")
            drain(env, engine, config, clock=self._clock, emit=self._emit)
            self._emit("chaos: checking")
            replica = None
            if servers.target_bootstrap_servers is not None and env.replica_topic is not None:
                ingest = None
                if ops is not None and env.ingest_topic is not None:
                    copy = preparation.REPLICA_PREFIX + env.ingest_topic
                    ingest = (env.ingest_topic, copy, ops.generations)
                replica = ReplicaAccess(
                    KafkaAccess(servers.target_bootstrap_servers, {}),
                    env.replica_topic,
                    preparation.REPLICA_ALIAS,
                    ingest,
                )
            result = run_check(
                engine,
                KafkaAccess(servers.bootstrap_servers, {}),
                env.topic,
                MIRROR,
                replica=replica,
                history_table=HISTORY,
            )
        finally:
            engine.dispose()
        return ChaosReport(
            seed=config.seed,
            planned=config.faults,
            faults=log_file.records,
            result=result,
            workload=workload.stats,
            processes={n: (s.starts, s.exits) for n, s in supervisor.slots.items()},
            zombie_exits=supervisor.zombie_exits,
            duration_s=self._clock.monotonic() - started,
            workdir=workdir,
            replica_topic=", ".join(
                preparation.REPLICA_PREFIX + t for t in (env.topic, env.ingest_topic) if t
            )
            if env.replica_topic
            else None,
            failovers=[] if ops is None else ops.failovers,
        )

    def _operations(
        self, env: preparation.Environment, supervisor: Supervisor
    ) -> ReplicaOperations | None:
        """What the replicator's operator faults act on; None: the run does not replicate."""
        target = env.servers.target_bootstrap_servers
        if target is None or env.replica_topic is None:
            return None
        source = env.servers.bootstrap_servers
        ingest = None
        if env.ingest_topic is not None:
            transactional_id = f"{env.prefix}-ingest"
            ingest = IngestWriter(
                source, env.ingest_topic, transactional_id, self._config.seed, self._clock
            )
        return ReplicaOperations(
            source,
            target,
            env.replica_group,
            preparation.REPLICATOR,
            env.replicate_env(),
            supervisor.log_dir,
            self._config.topic_partitions,
            ingest,
        )

    def _inject(
        self,
        plan: list[FaultKind],
        supervisor: Supervisor,
        env: preparation.Environment,
        log_file: FaultLog,
        ops: ReplicaOperations | None,
    ) -> None:
        config = self._config
        workdir = env.workdir
        replicates = env.replica_topic is not None
        ctx = FaultContext(
            supervisor=supervisor,
            clock=self._clock,
            rng=self._rng,
            relay_partitions=config.relay_partitions,
            mirror_slots=preparation.MIRROR_SLOTS,
            spark_jobs={
                slot: shown
                for slot, shown in preparation.TASK_STARTED.items()
                if slot in supervisor.slots
            },
            restart_broker=lambda: _restart(devenv.restart_kafka, workdir, True),
            restart_database=lambda: _restart(devenv.restart_postgres, workdir, "immediate"),
            mirror_pause_s=config.mirror_pause_s,
            replicator=preparation.REPLICATOR if replicates else None,
            replica_partitions=config.topic_partitions * (2 if env.ingest_topic else 1),
            restart_target_broker=(
                (lambda: _restart(devenv.restart_target_kafka, workdir, True))
                if replicates
                else None
            ),
            replicator_pause_s=config.replicator_pause_s,
            replica_ops=ops,
        )
        deadline = self._clock.monotonic() + config.duration_limit_s
        FaultInjector(plan, ctx, log_file, gap_s=config.gap_s, deadline=deadline).run()
        # The last fault's victim is restarted too before the writers stop (a Spark job
        # runs from time to time, so only the long-running processes are waited for).
        services = [name for name in supervisor.slots if name not in ctx.spark_jobs]
        if not ctx.wait(lambda: all(supervisor.running(n) for n in services), RECOVERY_S):
            self._emit(
                f"chaos: not every process was running again {RECOVERY_S:g} s after the last fault"
            )


def _restart(restart: Callable[..., str], workdir: Path, how: object) -> None:
    restart(workdir, how, timeout=SERVER_RESTART_TIMEOUT_S)
