"""What a chaos run plans: the replicator's fault kinds only when it replicates."""

from __future__ import annotations

from relay.chaos.config import ChaosConfig
from relay.chaos.names import REPLICA_KINDS, FaultKind


def test_the_replicator_kinds_are_planned_only_when_the_run_replicates() -> None:
    assert ChaosConfig().replicate
    assert ChaosConfig().fault_kinds == list(FaultKind)
    without = ChaosConfig(replicate=False).fault_kinds
    assert without == [k for k in FaultKind if k not in REPLICA_KINDS]
    assert len(without) == len(FaultKind) - 5
    chosen = (FaultKind.KILL9_RELAY, FaultKind.KILL9_TARGET_BROKER)
    assert ChaosConfig(kinds=chosen).fault_kinds == list(chosen)
    assert ChaosConfig(kinds=chosen, replicate=False).fault_kinds == [FaultKind.KILL9_RELAY]
