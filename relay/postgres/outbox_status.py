"""What ``relay status`` reads from the database: per relay partition the rows pending above
a position, the last publish, the dead letters and what its relay retries for; per
mirrored Kafka partition the stored offset and the dead
letters. Reads only: no lock is taken, so a running relay, mirror or writer never waits
for it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import text

from relay.postgres.engine import Database
from relay.postgres.outbox_holds import STALLS, stall_line

_NOW = text("SELECT statement_timestamp()")
# The position up to which rows of the previous relay partition count are unpublished,
# holding every partition there (0009_live_partition_count); NULL when none.
_BARRIER = text(
    "SELECT barrier FROM outbox_settings "
    "WHERE barrier IS NOT NULL AND outbox_unpublished_up_to(barrier)"
)
# Rows of outbox_positions above each partition's position, and the committed rows no draw
# has reached yet (outbox_undrawn, which a draw places above every position): pending.
_OUTBOX = text(
    """
    SELECT s.p AS partition, s.after AS position, pending.n AS pending,
           CASE WHEN pending.n > 0 THEN
             greatest(0, extract(epoch FROM statement_timestamp() - pending.oldest))
           END AS oldest_pending_age_s,
           coalesce(f.position, 0) AS floor, f.updated_at AS last_publish,
           (SELECT count(*) FROM outbox_dead_letters d WHERE d.partition = s.p)
             AS dead_letters
    FROM unnest(CAST(:partitions AS integer[]), CAST(:positions AS bigint[])) AS s(p, after)
    CROSS JOIN LATERAL (
      SELECT sum(c.n) AS n, min(c.oldest) AS oldest FROM (
        SELECT count(*) AS n, min(o.created_at) AS oldest
        FROM outbox_positions o WHERE o.partition = s.p AND o.position > s.after
        UNION ALL
        SELECT count(*), min(u.created_at) FROM outbox_undrawn u WHERE u.partition = s.p
      ) c
    ) pending
    LEFT JOIN outbox_published_floor f ON f.partition = s.p
    ORDER BY s.p
    """
)
_MIRROR = text(
    """
    SELECT o.consumer_group, o.topic, o.partition, o.next_offset,
           (SELECT count(*) FROM mirror_dead_letters d
            WHERE d.consumer_group = o.consumer_group AND d.topic = o.topic
              AND d.partition = o.partition) AS dead_letters
    FROM mirror_offsets o
    WHERE CAST(:group AS text) IS NULL OR o.consumer_group = CAST(:group AS text)
    ORDER BY o.consumer_group, o.topic, o.partition
    """
)


@dataclass(frozen=True, slots=True)
class OutboxPartitionStatus:
    partition: int
    position: int  # committed in Kafka, as given (0: none)
    pending: int  # rows of outbox_positions above ``position``, and rows not drawn yet
    oldest_pending_age_s: float | None  # the oldest pending row's age (None: none pending)
    floor: int  # recorded as published (outbox_published_floor; 0: never)
    last_publish: datetime | None  # when the floor last rose (None: never)
    dead_letters: int  # rows in outbox_dead_letters
    # What holds the partition (a snapshot): the row its relay retries a batch for, with
    # the reason and since when (outbox_stalls); rows of the previous relay partition
    # count still unpublished.
    held_up_by: tuple[str, ...]
    # What its relay retries a batch for (outbox_stalls): None while nothing holds it.
    stall: Stall | None = None


@dataclass(frozen=True, slots=True)
class Stall:
    outbox_id: int | None  # the row at fault (None: the whole batch, e.g. a broker down)
    topic: str | None
    reason: str
    since: datetime


@dataclass(frozen=True, slots=True)
class MirrorStoredOffset:
    group: str
    topic: str
    partition: int
    next_offset: int
    dead_letters: int  # rows in mirror_dead_letters


def outbox_status(
    database: Database, positions: Mapping[int, int]
) -> tuple[datetime, list[OutboxPartitionStatus]]:
    """The database's time and each relay partition of ``positions`` (partition ->
    position committed in Kafka) as the database sees it."""
    partitions = sorted(positions)
    params = {"partitions": partitions, "positions": [positions[p] for p in partitions]}
    with database.connect("reading the outbox's status") as conn:
        now = conn.execute(_NOW).scalar_one()
        rows = conn.execute(_OUTBOX, params).all()
        barrier = conn.execute(_BARRIER).scalar()
        count_change = (
            ()
            if barrier is None
            else (f"rows up to position {barrier} of the previous relay partition count",)
        )
        stalls = {
            int(r.partition): Stall(r.outbox_id, r.topic, str(r.reason), r.since)
            for r in conn.execute(STALLS, {"partitions": partitions})
        }
        holders = {
            p: tuple(_stall_line(s) for s in (stalls.get(p),) if s is not None) + count_change
            for p in partitions
        }
    return now, [
        OutboxPartitionStatus(
            partition=int(row.partition),
            position=int(row.position),
            pending=int(row.pending),
            oldest_pending_age_s=(
                None if row.oldest_pending_age_s is None else float(row.oldest_pending_age_s)
            ),
            floor=int(row.floor),
            last_publish=row.last_publish,
            dead_letters=int(row.dead_letters),
            held_up_by=holders[int(row.partition)],
            stall=stalls.get(int(row.partition)),
        )
        for row in rows
    ]


def _stall_line(stall: Stall) -> str:
    since = stall.since.astimezone(UTC).isoformat(timespec="seconds")
    return stall_line(stall.outbox_id, stall.topic, stall.reason, since)


def mirror_stored_offsets(database: Database, group: str | None = None) -> list[MirrorStoredOffset]:
    """Every row of mirror_offsets (of ``group``; None: of every group) with its dead
    letters."""
    with database.connect("reading mirror_offsets") as conn:
        rows = conn.execute(_MIRROR, {"group": group}).all()
    return [
        MirrorStoredOffset(
            str(row.consumer_group),
            str(row.topic),
            int(row.partition),
            int(row.next_offset),
            int(row.dead_letters),
        )
        for row in rows
    ]
