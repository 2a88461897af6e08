"""What a `--sync-groups` round commits for a group on the target: translated and caught-up
offsets that move it forward; backwards only when the group went back on the source;
never a partition not replicated up to the group's offset."""

from __future__ import annotations

from relay.replication.group_sync import (
    SyncPlan,
    plan_sync,
    sync_metadata,
    synced_from,
)
from relay.replication.translation import TranslatedOffset, TranslationStatus

T = "dr.orders"


def row(
    source: int | None,
    target: int | None,
    current: int | None,
    status: TranslationStatus = TranslationStatus.TRANSLATED,
    partition: int = 0,
) -> TranslatedOffset:
    return TranslatedOffset("orders", partition, source, T, target, status, current)


def synced(source: int, partition: int = 0) -> dict[tuple[str, int], str]:
    """The target offset of partition ``partition`` was synced from ``source``."""
    return {(T, partition): sync_metadata("orders", partition, source)}


def test_the_metadata_names_the_source_offset_it_was_synced_from() -> None:
    metadata = sync_metadata("orders.eu", 3, 1200)
    assert metadata == "relay replicate: orders.eu[3]@1200"  # as --translate-group wrote it
    assert synced_from(metadata, "orders.eu", 3) == 1200
    assert synced_from(metadata, "orders.eu", 4) is None  # another partition's
    assert synced_from(metadata, "orders", 3) is None
    assert synced_from("", "orders.eu", 3) is None  # committed by a consumer
    assert synced_from(None, "orders.eu", 3) is None
    assert synced_from("relay replicate: orders.eu[3]@None", "orders.eu", 3) is None


def test_a_group_without_an_offset_on_the_target_gets_the_translated_one() -> None:
    first = row(120, 117, None)
    assert plan_sync([first], {}) == SyncPlan(commit=(first,))


def test_forward_is_committed_and_the_same_offset_is_not_committed_again() -> None:
    ahead, same = row(150, 140, 117), row(120, 117, 117, partition=1)
    assert plan_sync([ahead, same], synced(120)) == SyncPlan(commit=(ahead,))


def test_caught_up_is_committed_like_a_translated_offset() -> None:
    end = row(300, 290, 117, TranslationStatus.CAUGHT_UP)
    assert plan_sync([end], synced(120)).commit == (end,)


def test_never_past_what_the_target_has_copied() -> None:
    """A partition the replicator has not copied up to the group's offset is waited for,
    and so is one beyond the source's end: neither moves the target offset."""
    waiting = row(500, None, 117, TranslationStatus.NOT_REPLICATED)
    beyond = row(900, None, None, TranslationStatus.BEYOND_SOURCE, partition=1)
    plan = plan_sync([waiting, beyond], synced(120))
    assert plan.commit == ()
    assert plan.waiting == (waiting, beyond)


def test_no_offset_on_the_source_leaves_the_target_alone() -> None:
    plan = plan_sync([row(None, None, 117, TranslationStatus.NO_OFFSET)], synced(120))
    assert plan == SyncPlan()


def test_backwards_only_when_the_group_went_back_on_the_source() -> None:
    # Synced from source offset 120 to 117; the group was reset to 40 on the source.
    back = row(40, 38, 117)
    assert plan_sync([back], synced(120)).commit == (back,)


def test_a_target_offset_set_by_the_group_itself_is_never_taken_back() -> None:
    """After a failover the group's consumers commit on the target (their own metadata);
    a stale source offset translating to an earlier copy never rewinds them."""
    stale = row(120, 117, 400)
    plan = plan_sync([stale], {(T, 0): ""})
    assert plan.commit == () and plan.ahead == (stale,)
    assert plan_sync([stale], {}).ahead == (stale,)


def test_not_backwards_when_the_source_offset_did_not_go_back() -> None:
    """Synced from 120, the target offset moved on to 400 (by a consumer on the target,
    keeping the metadata): the same source offset 120 does not take it back."""
    plan = plan_sync([row(120, 117, 400)], synced(120))
    assert plan.commit == ()
    assert plan_sync([row(130, 127, 400)], synced(120)).commit == ()
