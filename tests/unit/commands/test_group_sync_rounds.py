"""`relay replicate --sync-groups` rounds as an operator watches them: the failover
runbook waits until ``relay_replicate_group_sync_age_seconds`` is below the time since
the group's consumers stopped. That age must then vouch for a round that *read* the
group's offsets after they stopped, and that synced every partition the group consumed:
a partition not replicated up to the group's offset yet keeps the age growing."""

from __future__ import annotations

from collections.abc import Iterable

from relay.commands.group_sync import GroupSync
from relay.replication.translation import TranslatedOffset, TranslationStatus
from relay.runtime.metrics import ReplicaMetrics
from relay.settings.replicate import ReplicateSettings, load_replicate_settings

GROUP = "billing"
AGE = "relay_replicate_group_sync_age_seconds"
WAITING = "relay_replicate_group_sync_waiting_partitions"


def row(partition: int, status: TranslationStatus, target: int | None) -> TranslatedOffset:
    return TranslatedOffset("orders", partition, 12, "dr.orders", target, status, None)


class ScriptedTranslator:
    """One group's rounds: each translation answers the next of ``rounds``, and the wall
    clock moves by ``takes`` seconds while it is asked (a round's requests take time)."""

    def __init__(
        self, rounds: list[list[TranslatedOffset]], now: list[float], takes: float
    ) -> None:
        self.rounds, self.now, self.takes = rounds, now, takes
        self.applied: list[list[TranslatedOffset]] = []

    def target_members(self) -> int:
        return 0

    def translate_with_metadata(
        self, *, sync: bool = False
    ) -> tuple[list[TranslatedOffset], dict[tuple[str, int], str]]:
        self.now[0] += self.takes
        return self.rounds.pop(0), {}

    def apply(self, rows: Iterable[TranslatedOffset]) -> list[TranslatedOffset]:
        self.applied.append(list(rows))
        return self.applied[-1]

    def close(self) -> None:
        pass


def syncing(
    rounds: list[list[TranslatedOffset]], takes: float = 0.0
) -> tuple[GroupSync, ReplicaMetrics, list[float]]:
    now = [1000.0]
    metrics = ReplicaMetrics(wall=lambda: now[0])
    settings: ReplicateSettings = load_replicate_settings(
        environ={
            "RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS": "127.0.0.1:2",
            "RELAY_REPLICATE_TOPICS": "orders",
            "RELAY_REPLICATE_GROUP": "dr",
            "RELAY_REPLICATE_SYNC_GROUPS": GROUP,
        }
    )
    sync = GroupSync(
        settings, metrics, translator=lambda s, g: ScriptedTranslator(rounds, now, takes)
    )
    return sync, metrics, now


def test_a_round_that_leaves_a_partition_waiting_does_not_count_as_synced() -> None:
    waiting = [
        row(0, TranslationStatus.TRANSLATED, 7),
        row(1, TranslationStatus.NOT_REPLICATED, None),
    ]
    complete = [row(0, TranslationStatus.TRANSLATED, 7), row(1, TranslationStatus.TRANSLATED, 9)]
    sync, metrics, now = syncing([waiting, complete])
    value = metrics.registry.get_sample_value

    now[0] = 1005.0
    assert sync.sync(GROUP) == 1  # partition 0 is committed all the same
    now[0] = 1008.0
    # Partition 1 is not on the target yet: the group is not synced since the start.
    assert value(AGE, {"group": GROUP}) == 8.0
    assert value(WAITING, {"group": GROUP}) == 1.0

    assert sync.sync(GROUP) == 2
    now[0] = 1010.0
    assert value(AGE, {"group": GROUP}) == 2.0
    assert value(WAITING, {"group": GROUP}) == 0.0


def test_the_age_counts_from_when_the_round_began_to_read_the_groups_offsets() -> None:
    complete = [row(0, TranslationStatus.TRANSLATED, 7)]
    sync, metrics, now = syncing([complete], takes=4.0)
    now[0] = 1005.0
    sync.sync(GROUP)  # reads the group's offsets at 1005, done at 1009
    now[0] = 1010.0
    # Consumers that stopped at 1007 are not vouched for by this round: its age says 5 s.
    assert metrics.registry.get_sample_value(AGE, {"group": GROUP}) == 5.0
