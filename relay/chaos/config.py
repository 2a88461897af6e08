"""What a chaos run does: how many faults of which kinds, the workload, the pacing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from relay.chaos.names import DEFAULT_KINDS, REPLICA_KINDS, FaultKind
from relay.chaos.workload import WorkloadConfig


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    faults: int = 200
    seed: int = 7
    duration_limit_s: float = 780.0
    kinds: tuple[FaultKind, ...] = DEFAULT_KINDS
    workdir: Path | None = None
    keep_workdir: bool = False
    relay_partitions: int = 4
    topic_partitions: int = 3
    gap_s: tuple[float, float] = (0.3, 1.5)
    warmup_s: float = 5.0
    spark_every_s: tuple[float, float] = (10.0, 25.0)
    mirror_pause_s: float = 15.0
    replicate: bool = True  # a replicator copies the topic to a second cluster
    replicator_pause_s: float = 8.0  # longer than the replicator's transaction timeout
    drain_timeout_s: float = 240.0
    synchronous_commit: bool = True
    # `relay run` with one Kafka transaction per relay partition, and the Spark relay job
    # beside it (it fences such relays; beside the default ones it is refused)
    partition_transactions: bool = False
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)

    @property
    def fault_kinds(self) -> list[FaultKind]:
        """The kinds to plan: ``kinds``, without the replicator's unless it runs."""
        return [k for k in self.kinds if self.replicate or k not in REPLICA_KINDS]

    @property
    def ingests(self) -> bool:
        """Whether the run writes and replicates the ingest topic (for the fault that
        deletes and creates it again)."""
        return FaultKind.RECREATE_SOURCE_TOPIC in self.fault_kinds
