"""What a chaos run reports: the faults, the workload, the processes and the checker's
figures (the topic's, the mirror's and the replica's), as lines and as JSON."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from relay.chaos.checker import CheckResult
from relay.chaos.failover_checker import FailoverCount
from relay.chaos.injector import FaultRecord
from relay.chaos.workload import WorkloadStats


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
    replica_topic: str | None = None
    failovers: list[FailoverCount] = field(default_factory=list)  # lose_source_cluster's

    @property
    def injected(self) -> Counter[str]:
        return Counter(r.kind for r in self.faults if r.injected)

    @property
    def ok(self) -> bool:
        return self.result.ok and all(f.ok for f in self.failovers)

    def as_json(self) -> dict[str, object]:
        replica = self.result.replica
        return {
            "seed": self.seed,
            "faults_planned": self.planned,
            "faults_injected": dict(self.injected),
            "faults": [asdict(r) for r in self.faults],
            "events": self.result.events,
            "ledger": self.result.ledger,
            "anomalies": self.result.anomalies,
            "mirror_checked": self.result.mirror_mismatch is not None,
            "history_checked": self.result.history_mismatch is not None,
            "replica_checked": replica is not None,
            "replica": None
            if replica is None
            else {
                "topic": self.replica_topic,
                "source_records": replica.source,
                "copies": replica.copies,
                **replica.anomalies,
            },
            "failovers": [{**asdict(f), "ok": f.ok} for f in self.failovers],
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
        out.append(f"paused processes replaced by a new instance: {zombies or 'none'}")
        replica = self.result.replica
        if replica is not None:
            counts = " ".join(f"{k}={v}" for k, v in replica.anomalies.items())
            out.append(
                f"replica {self.replica_topic} on the second cluster: {replica.copies} "
                f"records for {replica.source} committed source records: {counts}"
            )
        for kind, examples in sorted(self.result.examples.items()):
            out.extend(f"  {kind}: {example}" for example in examples)
        out.append(f"duration: {self.duration_s:.0f} s; logs: {self.workdir}")
        out.extend(
            f"failover after the source cluster was lost, {f.describe()}" for f in self.failovers
        )
        out.append(self._summary_line())
        return out

    def _summary_line(self) -> str:
        """The checker's line; with a failover's counts (summed) before the verdict."""
        line = self.result.summary_line()
        if not self.failovers:
            return line
        counts = {
            "failover_lost": sum(f.lost for f in self.failovers),
            "failover_reprocessed_beyond": sum(
                max(0, f.reprocessed - f.allowed) for f in self.failovers
            ),
            "failover_repeated": sum(f.repeated for f in self.failovers),
        }
        shown = " ".join(f"{k}={v}" for k, v in counts.items())
        return f"{line.rpartition(' ')[0]} {shown} {'OK' if self.ok else 'FAILED'}"
