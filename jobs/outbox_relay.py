"""Spark job: publish the outbox to Kafka, one Spark task per relay partition.

    spark-submit jobs/outbox_relay.py [--master local[*]] [--partitions 0,1] [relay flags]
    python jobs/outbox_relay.py ...            (same, with the pip-installed PySpark)

The entry point spark-submit runs: the job is relay.spark.outbox_relay (in the installed
package), run with the command API's steps.
"""

from __future__ import annotations

import sys

from relay.commands.relay_job import drain_partition, plan_relay_job
from relay.spark.outbox_relay import RelaySteps, main

if __name__ == "__main__":
    sys.exit(main(RelaySteps(plan=plan_relay_job, drain=drain_partition)))
