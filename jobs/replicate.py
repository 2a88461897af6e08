"""Spark job: copy Kafka topics to another cluster exactly once, one Spark task per partition.

    spark-submit jobs/replicate.py [--master local[*]] --topics A,B [replicate flags]
    python jobs/replicate.py ...               (same, with the pip-installed PySpark)

The entry point spark-submit runs: the job is relay.spark.replicate (in the installed
package), run with the command API's steps.
"""

from __future__ import annotations

import sys

from relay.commands.replicate import (
    ReplicaTask,
    plan_replication,
    replicate_partition,
    with_end_offsets,
)
from relay.commands.replicate_shared import refuse_beside_members
from relay.settings.replicate import ReplicateSettings
from relay.spark.replicate import ReplicateSteps, main


def plan(settings: ReplicateSettings) -> list[ReplicaTask]:
    """Every selected source partition, up to its last stable offset now; refused beside
    continuous `relay replicate` instances (they would be fenced) unless --fence-members."""
    planned = plan_replication(settings)
    refuse_beside_members(settings.with_group(planned.group), "the replicate Spark job")
    return with_end_offsets(settings, planned.tasks())


if __name__ == "__main__":
    sys.exit(main(ReplicateSteps(plan=plan, copy=replicate_partition)))
