"""`relay replicate --lag` as a typed API: per selected source partition, its end on the
source, the replicator's position on the target, and how far behind that is, in offsets
and in seconds (relay.replication.lag). It reads both clusters and takes nothing over."""

from __future__ import annotations

import time

from relay.commands.groups import replicate_settings
from relay.kafka import replica_lag
from relay.replication.lag import RouteLag, route_lag
from relay.replication.types import NO_POSITION
from relay.settings.replicate import ReplicateSettings


def lag_report(settings: ReplicateSettings) -> list[RouteLag]:
    """One row per selected source partition, in topic and partition order."""
    settings = replicate_settings(settings, announce=False)
    found = replica_lag.routes(settings)
    # The positions first, the ends after: an end read later is never below a position.
    committed = replica_lag.positions(settings, [r for r, on_target in found if on_target])
    ends = replica_lag.source_ends(settings, [(r.topic, r.partition) for r, _ in found])
    behind = {
        (route.topic, route.partition): position.next_offset
        for route, position in committed.items()
        if position.exists and position.next_offset < ends[(route.topic, route.partition)]
    }
    times = replica_lag.first_record_times(settings, behind)
    now = time.time()
    rows = []
    for route, _ in found:
        key = (route.topic, route.partition)
        rows.append(
            route_lag(
                route,
                ends[key],
                committed.get(route, NO_POSITION),
                times.get(key),
                now,
                in_log=key not in behind or key in times,
            )
        )
    return rows
