"""`relay chaos`: workload, faults and the independent checker in one run.

1. start a PostgreSQL server and a Kafka broker of the run's own (never the shared ones),
   migrate, create the workload's tables and topic;
2. start the processes under test: a continuous ``relay run``, two ``relay mirror``
   consumers of one group, and now and then a run of the relay's and of the mirror's
   Spark job; a supervisor restarts whatever exits;
3. start the writers, then inject the planned faults, bounded in count and time;
4. stop the writers and the processes, drain with ``relay run --once`` and
   ``relay mirror --once``, then run the checker and stop the servers.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import create_engine

from relay import devenv
from relay.chaos import preparation
from relay.chaos.checker import CheckResult
from relay.chaos.checker_inputs import KafkaAccess, run_check
from relay.chaos.config import ChaosConfig
from relay.chaos.drain import drain
from relay.chaos.faults import FaultContext, FaultKind, plan_faults
from relay.chaos.injector import FaultInjector, FaultLog, FaultRecord
from relay.chaos.processes import Supervisor
from relay.chaos.servers import ChaosServers, remove_workdir, start_servers, stop_servers
from relay.chaos.workload import MIRROR, Workload, WorkloadStats
from relay.postgres.migrations import PROJECT_ROOT
from relay.runtime.clock import Clock


@dataclass
class ChaosReport:
    seed: int
    planned: int
    faults: list[FaultRecord]
    result: CheckResult
    workload: WorkloadStats
    processes: dict[str, tuple[int, Counter[str]]]
    zombie_exits: Counter[str]
    duration_s: float
    workdir: Path

    @property
    def injected(self) -> Counter[str]:
        return Counter(r.kind for r in self.faults if r.injected)

    @property
    def ok(self) -> bool:
        return self.result.ok

    def as_json(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "faults_planned": self.planned,
            "faults_injected": dict(self.injected),
            "faults": [asdict(r) for r in self.faults],
            "events": self.result.events,
            "ledger": self.result.ledger,
            "anomalies": self.result.anomalies,
            "mirror_checked": self.result.mirror_mismatch is not None,
            "ok": self.ok,
            "workload": self.workload.describe(),
            "processes": {
                n: {"starts": s, "exits": dict(e)} for n, (s, e) in self.processes.items()
            },
            "zombie_exits": dict(self.zombie_exits),
            "duration_s": round(self.duration_s, 1),
        }

    def lines(self) -> list[str]:
        by_kind = ", ".join(f"{k} {v}" for k, v in sorted(self.injected.items()))
        skipped = sum(1 for r in self.faults if not r.injected)
        out = [
            f"faults injected: {sum(self.injected.values())} of {self.planned} planned "
            f"(seed {self.seed}; {skipped} skipped and retried): {by_kind or 'none'}",
            f"events written (ledger): {self.result.ledger}; workload: {self.workload.describe()}",
        ]
        for name, (starts, exits) in sorted(self.processes.items()):
            shown = ", ".join(f"{k} x{v}" for k, v in sorted(exits.items()))
            out.append(f"process {name}: {starts} starts; exits: {shown or 'none'}")
        zombies = ", ".join(f"{k} x{v}" for k, v in sorted(self.zombie_exits.items()))
        out.append(f"paused relays replaced by a new instance: {zombies or 'none'}")
        for kind, examples in sorted(self.result.examples.items()):
            out.extend(f"  {kind}: {example}" for example in examples)
        out.append(f"duration: {self.duration_s:.0f} s; logs: {self.workdir}")
        out.append(self.result.summary_line())
        return out


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
            servers = start_servers(workdir)  # stopped below even if only one came up
            self._emit(
                f"chaos: own servers up: PostgreSQL 127.0.0.1:{servers.ports.postgres}, "
                f"Kafka {servers.bootstrap_servers}"
            )
            report = self._run_with(servers, workdir, started)
            ok = report.ok
            return report
        finally:
            stop_servers(workdir)
            if ok and not config.keep_workdir:
                # keep faults.jsonl; the servers' data and the process logs go
                remove_workdir(workdir / "pg")
                for name in ("kafka", "kafka-libs", "logs", "traps"):
                    shutil.rmtree(workdir / name, ignore_errors=True)

    def _run_with(self, servers: ChaosServers, workdir: Path, started: float) -> ChaosReport:
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
            plan = plan_faults(config.faults, list(config.kinds), self._rng)
            log_file = FaultLog(workdir / "faults.jsonl", self._emit, self._now)
            workload = Workload(engine, env.topic, config.workload, config.seed, self._clock)
            try:
                supervisor.start()
                workload.start()
                self._emit("chaos: writers and processes under test started")
                self._clock.wait(config.warmup_s)
                self._inject(plan, supervisor, workdir, log_file)
            finally:
                workload.stop()
                supervisor.shutdown()
                log_file.close()
            self._emit("chaos: writers stopped; draining with relay run --once")
            drain(env, engine, config, clock=self._clock, emit=self._emit)
            self._emit("chaos: checking")
            result = run_check(
                engine,
                KafkaAccess(servers.bootstrap_servers, {}),
                env.topic,
                MIRROR,
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
        )

    def _inject(
        self,
        plan: list[FaultKind],
        supervisor: Supervisor,
        workdir: Path,
        log_file: FaultLog,
    ) -> None:
        config = self._config
        ctx = FaultContext(
            supervisor=supervisor,
            clock=self._clock,
            rng=self._rng,
            relay_partitions=config.relay_partitions,
            mirror_slots=preparation.MIRROR_SLOTS,
            spark_jobs=preparation.TASK_STARTED,
            restart_broker=lambda: _restart(devenv.restart_kafka, workdir, True),
            restart_database=lambda: _restart(devenv.restart_postgres, workdir, "immediate"),
            mirror_pause_s=config.mirror_pause_s,
        )
        deadline = self._clock.monotonic() + config.duration_limit_s
        FaultInjector(plan, ctx, log_file, gap_s=config.gap_s, deadline=deadline).run()


def _restart(restart: Callable[..., str], workdir: Path, how: object) -> None:
    restart(workdir, how, timeout=120.0)
