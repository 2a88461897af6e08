"""Freshness of mirrored tables: heartbeats through the topics, and the view analysts query.

Revision ID: 0010_mirror_freshness
Revises: 0009_live_partition_count
Create Date: 2026-11-26

Analysts could not ask "is this mirrored table complete up to time T?" (every outbox
event committed before T applied), least of all on a quiet topic. Now (docs/mirror.md,
"Freshness"):

* ``outbox_horizon_as_of(p)`` is ``outbox_horizon(p)`` plus what the relay needs to vouch
  for a time: ``as_of``, the database's clock while it holds the partition's lock, and
  ``top``, the highest position of the partition at or below the horizon. Every
  transaction with rows in ``p`` takes that lock at its commit and keeps it until its
  commit is visible, so one whose commit was visible before ``as_of`` is at or below the
  horizon, and its rows at or below ``top``: once the relay has published up to ``top``,
  every event of ``p`` committed before ``as_of`` is in Kafka. ``as_of`` is NULL when the
  horizon is held up (a writer that does not finish) or held at a partition count
  change's barrier (rows committed before now may be above it). ``partitions`` is the
  relay partition count.
* ``mirror_heartbeats``: per consumer group, Kafka partition, outbox database and relay
  partition, the latest ``complete_through`` the mirror has applied the partition
  through, and the heartbeat's offset; written in the same transaction as the batch's
  offset (I4). It counts only while the stored offset is past it (a partition replayed
  from an earlier offset is unknown until the replay passes it again).
* ``mirror_table_topics``: which topics feed which mirrored table, per consumer group,
  recorded by the mirror at start-up from its mapping.
* ``relay_mirror_freshness``: per consumer group and mirrored table, ``complete_through``
  (the minimum over the table's topics, their partitions, and every relay partition of
  each outbox database that sends heartbeats) and ``lag_s``; NULL until every one of them
  has been seen.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010_mirror_freshness"
down_revision: str | None = "0009_live_partition_count"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HORIZON_AS_OF = """
CREATE FUNCTION outbox_horizon_as_of(
  p integer, OUT horizon bigint, OUT top bigint, OUT as_of timestamptz, OUT partitions integer
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  held bigint;
BEGIN
  -- Takes the partition's lock until the caller's transaction ends: call it in a
  -- transaction of its own. No writer of p commits while it is held.
  horizon := outbox_horizon(p);
  IF horizon IS NULL THEN
    RETURN;  -- held up by a writer that does not finish: nothing to vouch for
  END IF;
  SELECT s.barrier, s.partitions INTO held, partitions FROM outbox_settings s;
  IF held IS NOT NULL AND horizon = held
     AND horizon < (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_seq) THEN
    RETURN;  -- held at a count change's barrier: commits above it are not published yet
  END IF;
  top := greatest(
    (SELECT max(m.last_seq) FROM outbox_commits m WHERE m.partition = p AND m.last_seq <= horizon),
    (SELECT max(o.seq) FROM outbox o
     WHERE o.partition = p AND o.seq IS NOT NULL AND o.seq <= horizon),
    0);
  as_of := clock_timestamp();
END
$$
"""

_TABLES = """
CREATE TABLE mirror_heartbeats (
  consumer_group text NOT NULL,
  topic text NOT NULL,
  partition integer NOT NULL,
  source_database_id text NOT NULL,
  relay_partition integer NOT NULL,
  relay_partitions integer NOT NULL,
  complete_through timestamptz NOT NULL,
  heartbeat_offset bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT mirror_heartbeats_pkey
    PRIMARY KEY (consumer_group, topic, partition, source_database_id, relay_partition),
  CONSTRAINT mirror_heartbeats_relay_partition CHECK (relay_partition < relay_partitions)
);
CREATE TABLE mirror_table_topics (
  consumer_group text NOT NULL,
  table_name text NOT NULL,
  topic text NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT mirror_table_topics_pkey PRIMARY KEY (consumer_group, table_name, topic)
)
"""

# Per table: the minimum over its topics; per topic over its partitions (as many as the
# mirror last recorded in mirror_offsets); per partition over the outbox databases that
# sent heartbeats; per database over its relay partitions (as many as its newest
# heartbeat says). Only heartbeats below the partition's stored offset count (a partition
# replayed from an earlier offset, its table maybe emptied, is complete again once the
# replay passes them). One missing anywhere: NULL.
_VIEW = """
CREATE VIEW relay_mirror_freshness AS
WITH topic_sizes AS (
  SELECT consumer_group, topic, max(topic_partitions) AS partitions
  FROM mirror_offsets GROUP BY consumer_group, topic
), applied AS (
  SELECT h.* FROM mirror_heartbeats h
  JOIN mirror_offsets o USING (consumer_group, topic, partition)
  WHERE h.heartbeat_offset < o.next_offset
), counts AS (
  SELECT DISTINCT ON (consumer_group, topic, partition, source_database_id)
         consumer_group, topic, partition, source_database_id, relay_partitions
  FROM applied
  ORDER BY consumer_group, topic, partition, source_database_id, complete_through DESC
), per_source AS (
  SELECT c.consumer_group, c.topic, c.partition,
         CASE WHEN count(*) = c.relay_partitions THEN min(h.complete_through) END AS through
  FROM counts c
  JOIN applied h USING (consumer_group, topic, partition, source_database_id)
  WHERE h.relay_partition < c.relay_partitions
  GROUP BY c.consumer_group, c.topic, c.partition, c.source_database_id, c.relay_partitions
), per_partition AS (
  SELECT consumer_group, topic, partition,
         CASE WHEN bool_and(through IS NOT NULL) THEN min(through) END AS through
  FROM per_source GROUP BY consumer_group, topic, partition
), per_topic AS (
  SELECT p.consumer_group, p.topic,
         CASE WHEN count(p.through) = t.partitions THEN min(p.through) END AS through
  FROM per_partition p JOIN topic_sizes t USING (consumer_group, topic)
  WHERE p.partition < t.partitions
  GROUP BY p.consumer_group, p.topic, t.partitions
), per_table AS (
  SELECT tt.consumer_group, tt.table_name,
         CASE WHEN bool_and(pt.through IS NOT NULL) THEN min(pt.through) END AS through
  FROM mirror_table_topics tt LEFT JOIN per_topic pt USING (consumer_group, topic)
  GROUP BY tt.consumer_group, tt.table_name
)
SELECT consumer_group, table_name, through AS complete_through,
       extract(epoch FROM now() - through)::float8 AS lag_s
FROM per_table
"""

_GRANTS = """
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_relay') THEN
    GRANT EXECUTE ON FUNCTION outbox_horizon_as_of(integer) TO outbox_relay;
  END IF;
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_mirror') THEN
    GRANT SELECT, INSERT, UPDATE ON mirror_heartbeats TO outbox_mirror;
    GRANT SELECT, INSERT, DELETE ON mirror_table_topics TO outbox_mirror;
    GRANT SELECT ON relay_mirror_freshness TO outbox_mirror;
  END IF;
END
$$
"""


def upgrade() -> None:
    op.execute(_HORIZON_AS_OF)
    op.execute(_TABLES)
    op.execute(_VIEW)
    op.execute(_GRANTS)


def downgrade() -> None:
    op.execute("DROP VIEW relay_mirror_freshness")
    op.execute("DROP TABLE mirror_table_topics")
    op.execute("DROP TABLE mirror_heartbeats")
    op.execute("DROP FUNCTION outbox_horizon_as_of(integer)")
