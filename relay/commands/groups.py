"""The default groups of `relay mirror` and `relay replicate`: unique to a deployment, as
the relay's transactional-id prefix is (from the database's id), except where the fixed
default of earlier versions holds state.

A mirror without ``--group`` takes ``relay-mirror-<first 8 hex digits of the mirror
database's id>``; a replicator ``relay-replicate-<the source cluster's id>``. But a
deployment that stored offsets (``mirror_offsets`` rows) or positions (offsets on the
target cluster) under the old default, ``relay-mirror`` or ``relay-replicate``, keeps
that group: another one would start from nothing and apply or copy everything again.
Each command says once which group it uses and why.
"""

from __future__ import annotations

import logging

from relay.kafka.replica_topics import TopicPlanner
from relay.postgres.engine import Database
from relay.postgres.migrations import check_schema
from relay.postgres.mirror_offsets import group_offsets
from relay.postgres.outbox_source import PostgresOutboxSource
from relay.settings.mirror import LEGACY_GROUP as LEGACY_MIRROR_GROUP
from relay.settings.mirror import MirrorSettings
from relay.settings.replicate import ReplicateSettings
from relay.settings.replicate_spec import LEGACY_GROUP as LEGACY_REPLICATE_GROUP

log = logging.getLogger(__name__)
_GIVE_ONE = "set --group to choose"


def mirror_settings(
    settings: MirrorSettings, database: Database, *, announce: bool = True
) -> MirrorSettings:
    """``settings`` with the group resolved (as given, else the default). ``announce``:
    log which group and why (a Spark task does not: its driver did)."""
    if settings.group_name is not None:
        return settings
    check_schema(database)  # mirror_offsets and outbox_identity are there
    held = len(group_offsets(database, LEGACY_MIRROR_GROUP))
    if held:
        group = LEGACY_MIRROR_GROUP
        why = (
            f"it holds the stored offsets of {held} partition(s) in mirror_offsets (the "
            "default of earlier versions), kept so that nothing is applied again"
        )
    else:
        database_id = PostgresOutboxSource(database).identity().database_id
        group = f"{LEGACY_MIRROR_GROUP}-{database_id.replace('-', '')[:8]}"
        why = "the default of this mirror database, from its id"
    if announce:
        log.info("mirror group %s: %s; %s", group, why, _GIVE_ONE)
    return settings.with_group(group)


def replicate_settings(settings: ReplicateSettings, *, announce: bool = True) -> ReplicateSettings:
    """``settings`` with the group resolved (as given, else the default): the old
    default where it holds positions of the selected topics on the target cluster."""
    if settings.group_name is not None:
        return settings
    planner = TopicPlanner(settings)
    held = planner.positions_held(LEGACY_REPLICATE_GROUP)
    if held:
        group = LEGACY_REPLICATE_GROUP
        why = (
            f"it holds positions of {', '.join(held)} on the target cluster (the default of "
            "earlier versions), kept so that nothing is copied again"
        )
    else:
        group = f"{LEGACY_REPLICATE_GROUP}-{planner.cluster_ids()[0]}"
        why = "the default of this source cluster, from its id"
    if announce:
        log.info("replicator group %s: %s; %s", group, why, _GIVE_ONE)
    return settings.with_group(group)
