"""The replicator's operator faults (relay.chaos.replica_faults): planned like the others,
skipped where the run has no replicator, and the supervisor's hold and release that let
an operator run `relay replicate` by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from relay.chaos import faults, replica_faults
from relay.chaos.config import ChaosConfig
from relay.chaos.faults import WEIGHTS
from relay.chaos.names import REPLICA_KINDS, FaultKind
from relay.chaos.processes import Command, Slot, Supervisor
from relay.errors import FaultSkipped
from tests.fakes.publishing import FakeClock
from tests.unit.chaos.test_faults import _context

OPERATOR_KINDS = (FaultKind.RECREATE_SOURCE_TOPIC, FaultKind.DELETE_REPLICATOR_GROUP)


def test_every_kind_has_one_action_and_a_weight() -> None:
    assert set(faults.ACTIONS) | set(replica_faults.ACTIONS) == set(FaultKind)
    assert not set(faults.ACTIONS) & set(replica_faults.ACTIONS)
    assert set(WEIGHTS) == set(FaultKind)
    assert set(OPERATOR_KINDS) <= REPLICA_KINDS


def test_the_ingest_topic_is_written_only_when_its_fault_is_planned() -> None:
    assert ChaosConfig().ingests
    assert not ChaosConfig(kinds=(FaultKind.DELETE_REPLICATOR_GROUP,)).ingests
    assert not ChaosConfig(replicate=False).ingests


@pytest.mark.parametrize("kind", OPERATOR_KINDS)
def test_skipped_without_a_replicator(kind: FaultKind) -> None:
    ctx = _context(FakeClock())
    with pytest.raises(FaultSkipped, match="no replicator"):
        replica_faults.ACTIONS[kind](ctx)


def test_hold_stops_the_slots_process_and_keeps_it_down_until_released(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path, FakeClock())
    sleeper = Command([sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path)
    supervisor.add(Slot("replicator", lambda _n: sleeper, lambda: 0.0))
    supervisor.tick()
    assert supervisor.running("replicator") is not None
    assert supervisor.hold("replicator", kill=True) == -9
    supervisor.tick()
    assert supervisor.running("replicator") is None  # held: not restarted
    assert supervisor.slots["replicator"].exits == {"SIGKILL": 1}
    supervisor.release("replicator")
    supervisor.tick()
    assert supervisor.running("replicator") is not None
    supervisor.shutdown(timeout=5)
    assert supervisor.slots["replicator"].starts == 2
