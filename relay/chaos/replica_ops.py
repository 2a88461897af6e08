"""What the replicator's operator faults act on (relay.chaos.replica_faults): both
clusters, the replicator's group and slot, how an operator runs `relay replicate` by
hand, the ingest topic's writer, and the records of each ingest topic deleted so far."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from relay.chaos.failover_checker import FailoverCount
from relay.chaos.ingest import IngestWriter
from relay.chaos.processes import run_logged
from relay.chaos.topic_records import TopicRecord
from relay.devenv.cli_runner import relay_command

WAY_OUT_TIMEOUT_S = 120.0
KAFKA_EXIT = 4  # a cluster that did not answer (e.g. restarting): the operator tries again


@dataclass
class ReplicaOperations:
    source: str  # the source cluster's bootstrap servers
    target: str  # the target cluster's
    group: str  # the replicator's group, on the target
    slot: str  # the replicator's slot in the supervisor
    replicate_env: Mapping[str, str]  # `relay replicate`'s environment, as the slot's
    logs: Path
    partitions: int  # of each replicated topic
    ingest: IngestWriter | None = None
    # Each ingest topic deleted so far: its records, as a read_committed consumer saw them
    # just before it was deleted (every one of them copied by then).
    generations: list[list[TopicRecord]] = field(default_factory=list)
    # Each consumer group failed over after its source cluster was lost: the checker's counts.
    failovers: list[FailoverCount] = field(default_factory=list)
    _runs: int = 0

    def replicate(self, *args: str, attempts: int = 3) -> tuple[int, str, str]:
        """`relay replicate ARGS` as an operator runs it (tried again while a cluster does
        not answer); its exit code (-1: killed after WAY_OUT_TIMEOUT_S), its output's last
        line and its whole output."""
        self._runs += 1
        log = self.logs / f"operator.{self._runs:04d}.log"
        code = KAFKA_EXIT
        for _ in range(attempts):
            code = run_logged(
                relay_command("replicate", *args), self.replicate_env, log, WAY_OUT_TIMEOUT_S
            )
            if code != KAFKA_EXIT:
                break
        try:
            output = log.read_text(errors="replace")
        except OSError:
            output = ""
        return code, last_line(log), output


def last_line(path: Path, containing: Sequence[str] = ()) -> str:
    """The last non-empty line of ``path`` that contains each of ``containing``."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    found = [line for line in lines if line.strip() and all(t in line for t in containing)]
    return found[-1].strip() if found else ""
