"""The mirror's stored offsets read and moved outside a batch (the batches move them:
:mod:`.mirror_store`): the group commands read them, and ``relay mirror
--reset-recreated-topic`` moves those of a topic created again back to its start."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlalchemy as sa

from relay.errors import MirrorOffsetConflict
from relay.mirroring.types import StoredOffset, TopicIdentity, TopicPartitionKey
from relay.postgres.engine import Database
from relay.postgres.schema import mirror_offsets

_RESET = sa.text(
    "UPDATE mirror_offsets SET next_offset = 0, topic_id = :topic_id, updated_at = now(), "
    "topic_partitions = CASE WHEN partition < :partitions THEN CAST(:partitions AS integer) END "
    "WHERE consumer_group = :group AND topic = :topic AND partition = :partition "
    "AND next_offset = :expected AND topic_id IS NOT DISTINCT FROM :old_id"
)


def group_offsets(database: Database, group: str) -> dict[TopicPartitionKey, StoredOffset]:
    """Every stored offset of ``group``."""
    c = mirror_offsets.c
    query = sa.select(c.topic, c.partition, c.next_offset, c.topic_id, c.topic_partitions).where(
        c.consumer_group == group
    )
    with database.connect("reading mirror_offsets", retriable=True) as conn:
        return {(r[0], r[1]): StoredOffset(r[2], r[3], r[4]) for r in conn.execute(query)}


def reset_offsets(
    database: Database,
    group: str,
    *,
    topic: str,
    identity: TopicIdentity,
    stale: Sequence[tuple[int, StoredOffset]],
) -> None:
    """Move the ``stale`` offsets (partition, as read) of ``topic`` to offset 0 of the
    topic ``identity``, in one transaction; MirrorOffsetConflict (nothing changed) when
    one of them changed since it was read."""
    with database.begin("resetting mirror_offsets") as conn:
        for partition, stored in stale:
            params = {
                "group": group,
                "topic": topic,
                "partition": partition,
                "expected": stored.next_offset,
                "old_id": stored.topic_id,
                "topic_id": identity.topic_id,
                "partitions": identity.partitions,
            }
            if conn.execute(_RESET, params).rowcount != 1:
                raise MirrorOffsetConflict(
                    f"the stored offset of {topic}[{partition}] changed since it was read "
                    "(is a mirror of the group running?); nothing changed",
                    topic,
                    partition,
                    stored.next_offset,
                )


def tables_with_rows(database: Database, tables: Mapping[str, sa.Table]) -> list[str]:
    """The names of ``tables`` (name -> reflected table) that hold at least one row."""
    with database.connect("reading the mirrored tables") as conn:
        return [
            name
            for name, table in tables.items()
            if conn.execute(sa.select(sa.exists().select_from(table))).scalar()
        ]
