"""The consume loop's log lines: assignments, each batch, and its progress every so often."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from relay.errors import RelayError
from relay.mirroring.ports import RecordStream
from relay.mirroring.types import ApplyResult, MirrorSummary, TopicPartitionKey


def log_assigned(log: logging.Logger, starts: Mapping[TopicPartitionKey, int | None]) -> None:
    shown = (f"{t}[{p}] from {'beginning' if o is None else o}" for (t, p), o in starts.items())
    log.info("assigned %s", ", ".join(shown))


def log_revoked(log: logging.Logger, partitions: Sequence[TopicPartitionKey], dropped: int) -> None:
    shown = ", ".join(tp_text(tp) for tp in partitions)
    log.info("revoked %s (%d fetched records left to the next owner)", shown, dropped)


def log_batch(
    log: logging.Logger, tp: TopicPartitionKey, result: ApplyResult, next_offset: int
) -> None:
    """A committed batch: a warning with its dead letters, if any."""
    if result.dead_letters:
        offsets = ", ".join(str(d.record.offset) for d in result.dead_letters[:10])
        more = "" if len(result.dead_letters) <= 10 else ", ..."
        log.warning(
            "%s: %d records dead-lettered (offsets %s%s), first error: %s",
            tp_text(tp),
            len(result.dead_letters),
            offsets,
            more,
            result.dead_letters[0].error,
        )
    if result.skipped_tombstones:
        count = len(result.skipped_tombstones)
        shown = "; ".join(f"offset {o}: {why}" for o, why in result.skipped_tombstones[:5])
        log.warning(
            "%s: %d tombstone%s skipped (%s%s)",
            tp_text(tp),
            count,
            "" if count == 1 else "s",
            shown,
            "" if count <= 5 else "; ...",
        )
    log.debug(
        "%s: applied %d, skipped %d, next offset %d",
        tp_text(tp),
        result.applied,
        result.skipped,
        next_offset,
    )


def log_progress(
    log: logging.Logger,
    stream: RecordStream,
    stored: Mapping[TopicPartitionKey, int],
    total: MirrorSummary,
) -> None:
    """What was applied so far, and the lag of each owned partition (``stored``: its
    stored next offset)."""
    owned = sorted(stored)
    if not owned:
        log.info("no partitions assigned")
        return
    try:
        stable = stream.last_stable_offsets(owned)
    except RelayError as exc:
        log.warning("cannot read last stable offsets for the lag: %s", exc)
        stable = {}
    lag = {tp: stable[tp] - stored[tp] for tp in owned if tp in stable}
    log.info(
        "applied %d records so far (%d dead-lettered, %d skipped); lag: %s",
        total.total("applied"),
        total.total("dead_lettered"),
        total.total("skipped"),
        ", ".join(f"{tp_text(tp)}={n}" for tp, n in lag.items()) or "unknown",
        extra={
            "applied": total.total("applied"),
            "dead_lettered": total.total("dead_lettered"),
            "skipped": total.total("skipped"),
            "lag": {tp_text(tp): n for tp, n in lag.items()},
        },
    )


def tp_text(tp: TopicPartitionKey) -> str:
    return f"{tp[0]}[{tp[1]}]"
