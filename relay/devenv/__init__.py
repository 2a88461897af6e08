"""Local PostgreSQL + Kafka (KRaft) servers for development, tests and CI.

``up()`` starts (or reuses) the servers under a working directory (``$RELAY_DEV_DIR``,
default ``./.relay-dev``): PostgreSQL, a Kafka broker and the broker of a second,
independent Kafka cluster (e.g. a replication target); it returns their :class:`Endpoints`.
``down()`` stops them. ``python -m relay.devenv up|down|status`` does the same from a shell.
"""

from relay.errors import DevEnvError

from .endpoints import (
    DevEnvStatus,
    Endpoints,
    SaslEndpoint,
    ServiceStatus,
    describe,
    describe_endpoints,
    describe_status,
    env_file,
)
from .environment import down, status, up
from .kafka import kafka_pid, restart_kafka, start_kafka, stop_kafka
from .postgres import postgres_pid, restart_postgres, start_postgres, stop_postgres
from .target import (
    restart_target_kafka,
    start_target_kafka,
    stop_target_kafka,
    target_kafka_pid,
)
from .workdir import Ports, configured_ports, resolve_workdir

__all__ = [
    "DevEnvError",
    "DevEnvStatus",
    "Endpoints",
    "Ports",
    "SaslEndpoint",
    "ServiceStatus",
    "configured_ports",
    "describe",
    "describe_endpoints",
    "describe_status",
    "down",
    "env_file",
    "kafka_pid",
    "postgres_pid",
    "resolve_workdir",
    "restart_kafka",
    "restart_postgres",
    "restart_target_kafka",
    "start_kafka",
    "start_postgres",
    "start_target_kafka",
    "status",
    "stop_kafka",
    "stop_postgres",
    "stop_target_kafka",
    "target_kafka_pid",
    "up",
]
