"""Spark job: mirror Kafka topics into PostgreSQL tables, one Spark task per Kafka partition.

    spark-submit jobs/mirror.py [--master local[*]] [--mapping mirror.toml] [mirror flags]
    python jobs/mirror.py ...                  (same, with the pip-installed PySpark)

The entry point spark-submit runs: the job is relay.spark.mirror (in the installed
package), run with the command API's steps.
"""

from __future__ import annotations

import sys

from relay.commands.mirror import mirror_partition, plan_mirror_job
from relay.spark.mirror import MirrorSteps, main

if __name__ == "__main__":
    sys.exit(main(MirrorSteps(plan=plan_mirror_job, apply=mirror_partition)))
