"""The replicator's operator faults: a change on either cluster that the replicator must
refuse (exit 2, one line), followed by the documented way out, run as an operator runs it
(docs/replication.md, "When the positions do not fit"). The checker then finds every
record copied once: the recreated topic's new records from its first offset, the old
topic's copies kept (relay.chaos.replica_checker, generations).

A failover after the source cluster is lost is another fault of this family, in
relay.chaos.failover (on a source cluster of its own, which it can lose).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from relay.chaos.checker_inputs import KafkaAccess, read_topic
from relay.chaos.failover import lose_source_cluster
from relay.chaos.faults import FaultContext, Outcome
from relay.chaos.logwatch import Fenced, LogReader, source_partitions_fenced
from relay.chaos.names import FaultKind
from relay.chaos.preparation import REPLICA_PREFIX
from relay.chaos.replica_checker import generation as named
from relay.chaos.replica_ops import ReplicaOperations, last_line
from relay.chaos.topic_records import TopicRecord
from relay.errors import FaultSkipped, RelayError

_RESET_HINT = re.compile(r"left alone: `relay replicate --reset-recreated-topic (\S+)`")
CAUGHT_UP_S = 90.0  # for the replica to hold every record of the topic about to go
REFUSED_S = 90.0  # for the replicator to refuse (exit 2) after the change


def _operations(ctx: FaultContext) -> ReplicaOperations:
    if ctx.replica_ops is None:
        raise FaultSkipped("no replicator in this run")
    return ctx.replica_ops


def recreate_source_topic(ctx: FaultContext) -> Outcome:
    """Pause the ingest topic's writer, wait until the replica holds every record of the
    topic, delete it and create it again on the source (the writer goes on in it, a new
    generation); the replicator must refuse (exit 2); then, as an operator: stop it,
    `relay replicate --reset-recreated-topic TOPIC --yes`, start it again."""
    ops = _operations(ctx)
    ingest = ops.ingest
    if ingest is None:
        raise FaultSkipped("no ingest topic in this run")
    topic = ingest.topic
    if not ingest.pause():
        ingest.resume(ingest.generation)
        raise FaultSkipped("the ingest writer did not finish its transaction")
    try:
        old = _copied_entirely(ctx, ops, topic, ingest.generation)
    except FaultSkipped:
        ingest.resume(ingest.generation)
        raise
    refusals = ctx.supervisor.slots[ops.slot].exits["exit 2"]
    _recreate(ctx, ops.source, topic, ops.partitions)
    ops.generations.append(old)
    ingest.resume(ingest.generation + 1)
    refused = _refused(ctx, ops, refusals, "deleted and created again")
    done = _way_out(ctx, ops, "--reset-recreated-topic", topic)
    return Outcome(
        f"source topic {topic}",
        f"deleted and created again after its {len(old)} records were copied (generation "
        f"{ingest.generation}); {refused}; operator: {done}; replicator started again",
    )


def delete_replicator_group(ctx: FaultContext) -> Outcome:
    """SIGKILL the replicator, delete its group on the target cluster (its positions), and
    start it again: it must refuse (exit 2: copies without a position); then, as an
    operator: stop it, `relay replicate --restore-positions --yes`, start it again."""
    ops = _operations(ctx)
    refusals = ctx.supervisor.slots[ops.slot].exits["exit 2"]
    ctx.supervisor.hold(ops.slot, kill=True)
    try:
        _delete_group(ctx, ops.target, ops.group)
    finally:
        ctx.supervisor.release(ops.slot)
    process = ctx.running(ops.slot)
    fenced = Fenced(LogReader(process.log_path), source_partitions_fenced)
    expected = _routes(ops)

    def ready() -> bool:  # no partition lacked its position: nothing to refuse
        return process.alive and len(fenced()) >= expected

    refused = _refused(ctx, ops, refusals, "has no position", ready)
    if refused.startswith("not refused"):
        return Outcome(f"replicator group {ops.group}", f"deleted; {refused}")
    done = _way_out(ctx, ops, "--restore-positions")
    return Outcome(
        f"replicator group {ops.group}",
        f"SIGKILL of the replicator, group deleted on the target; {refused}; operator: "
        f"{done}; replicator started again",
    )


def _way_out(ctx: FaultContext, ops: ReplicaOperations, *first: str) -> str:
    """With the replicator stopped, `relay replicate FIRST --yes`, then `--reset-recreated-
    topic T --yes` for each topic T it left alone naming that way out (a topic created
    again since its last copy); the replicator started again. What ran, and its last
    line; FaultSkipped when a step fails."""
    ctx.supervisor.hold(ops.slot)
    done: list[str] = []
    try:
        steps = [first]
        while steps:
            step = steps.pop(0)
            code, line, output = ops.replicate(*step, "--yes")
            done.append(f"{' '.join(step)} --yes ({line})")
            if code != 0:
                raise FaultSkipped(f"{done[-1]} exited {code}")
            if step is first:
                hints = sorted(set(_RESET_HINT.findall(output)))
                steps += [("--reset-recreated-topic", topic) for topic in hints]
    finally:
        ctx.supervisor.release(ops.slot)
    return ", then ".join(done)


def _routes(ops: ReplicaOperations) -> int:
    return ops.partitions * (1 if ops.ingest is None else 2)


def _copied_entirely(
    ctx: FaultContext, ops: ReplicaOperations, topic: str, generation: int
) -> list[TopicRecord]:
    """The topic's records, once the replica holds a copy of each (read independently:
    the copies of this generation counted on the target)."""
    try:
        records = read_topic(KafkaAccess(ops.source, {}), topic, timeout=60.0)
    except RelayError as exc:
        raise FaultSkipped(f"reading {topic} failed: {exc}") from None
    replica = KafkaAccess(ops.target, {})

    def copied() -> bool:
        try:  # the replicator may not have created the target topic yet
            copies = read_topic(replica, REPLICA_PREFIX + topic, timeout=30.0)
        except RelayError:
            return False
        return sum(1 for c in copies if named(c.value) == generation) >= len(records)

    if not ctx.wait(copied, CAUGHT_UP_S):
        raise FaultSkipped(f"the replica of {topic} did not catch up in {CAUGHT_UP_S:g} s")
    return records


def _recreate(ctx: FaultContext, bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    except KafkaException as exc:
        raise FaultSkipped(f"deleting {topic} failed: {exc}") from None
    errors: list[str] = []

    def created() -> bool:  # the deletion completes in the background
        future = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
        try:
            future[topic].result(60)
        except KafkaException as exc:
            errors.append(str(exc))
            return False
        return True

    if not ctx.wait(created, 60.0):
        raise FaultSkipped(f"creating {topic} again failed: {errors[-1:]}")


def _delete_group(ctx: FaultContext, bootstrap: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    errors: list[str] = []

    def deleted() -> bool:  # the coordinator may be loading after a broker restart
        try:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(60)
        except KafkaException as exc:
            errors.append(str(exc))
            return False
        return True

    if not ctx.wait(deleted, 60.0):
        raise FaultSkipped(f"deleting group {group} failed: {errors[-1:]}")


def _refused(
    ctx: FaultContext,
    ops: ReplicaOperations,
    before: int,
    reason: str,
    ready: Callable[[], bool] | None = None,
) -> str:
    """Wait until the replicator has exited 2 once more (or ``ready`` says it runs
    without refusing); what its log said."""
    exits = ctx.supervisor.slots[ops.slot].exits

    def ended() -> bool:
        return exits["exit 2"] > before or (ready is not None and ready())

    if not ctx.wait(ended, REFUSED_S):
        raise FaultSkipped(f"the replicator neither refused nor ran within {REFUSED_S:g} s")
    if exits["exit 2"] <= before:
        return "not refused: every partition still had its position (a commit in flight)"
    logs = sorted(ops.logs.glob(f"{ops.slot}.*.log"))
    line = next((found for log in reversed(logs) if (found := last_line(log, [reason]))), "")
    said = line.partition("error: ")[2] or line
    return f"replicator refused (exit 2): {said[:160]}{'...' if len(said) > 160 else ''}"


ACTIONS: dict[FaultKind, Callable[[FaultContext], Outcome]] = {
    FaultKind.RECREATE_SOURCE_TOPIC: recreate_source_topic,
    FaultKind.DELETE_REPLICATOR_GROUP: delete_replicator_group,
    FaultKind.LOSE_SOURCE_CLUSTER: lose_source_cluster,
}
