"""What a chaos run plans: the replicator's fault kinds only when it replicates, and the
kinds injected only on request (a source cluster lost) only when named."""

from __future__ import annotations

from relay.chaos.config import ChaosConfig
from relay.chaos.names import ON_REQUEST_KINDS, REPLICA_KINDS, FaultKind


def test_the_replicator_kinds_are_planned_only_when_the_run_replicates() -> None:
    assert ChaosConfig().replicate
    assert ChaosConfig().fault_kinds == [k for k in FaultKind if k not in ON_REQUEST_KINDS]
    assert FaultKind.LOSE_SOURCE_CLUSTER in ON_REQUEST_KINDS
    without = ChaosConfig(replicate=False).fault_kinds
    assert without == [k for k in FaultKind if k not in REPLICA_KINDS]
    assert len(without) == len(FaultKind) - 6
    chosen = (FaultKind.KILL9_RELAY, FaultKind.KILL9_TARGET_BROKER)
    assert ChaosConfig(kinds=chosen).fault_kinds == list(chosen)
    assert ChaosConfig(kinds=chosen, replicate=False).fault_kinds == [FaultKind.KILL9_RELAY]


def test_a_kind_injected_on_request_is_planned_when_named() -> None:
    chosen = (FaultKind.LOSE_SOURCE_CLUSTER,)
    assert ChaosConfig(kinds=chosen).fault_kinds == list(chosen)
    assert ChaosConfig(kinds=chosen, replicate=False).fault_kinds == []
