"""The Prometheus metrics of `relay run`, `relay mirror` and `relay replicate`, and the
HTTP server of ``/metrics``, ``/healthz`` and ``/readyz`` (docs/operations.md, "Metrics and
health").

Every metric name is declared in this package, once, on a registry of the process's own
(never prometheus_client's global one, so that a test can hold several). The cores never
import it: they tell an observer what they do (``RelayObserver`` in
relay.publishing.ports, ``LoopObserver`` in relay.mirroring.observer, ``ReplicaObserver``
in relay.replication.ports). :class:`OutboxMetrics`, :class:`MirrorMetrics` and
:class:`ReplicaMetrics` are those observers; relay.commands hands them in and adds what
only it sees (the start-up checks, fencing, a partition that stops, the queries asked at
scrape time). prometheus_client is imported nowhere else (a contract in pyproject.toml).
"""

from relay.runtime.metrics.base import (
    BATCH_BUCKETS_S,
    QUERY_EVERY_S,
    ProcessMetrics,
    TopicPartition,
)
from relay.runtime.metrics.mirror import MIRROR_CONSUMER, MirrorMetrics, RecordTimes
from relay.runtime.metrics.outbox import Backlog, OutboxMetrics
from relay.runtime.metrics.replica import ReplicaMetrics
from relay.runtime.metrics.server import MetricsServer, serving

__all__ = [
    "BATCH_BUCKETS_S",
    "MIRROR_CONSUMER",
    "QUERY_EVERY_S",
    "Backlog",
    "MetricsServer",
    "MirrorMetrics",
    "OutboxMetrics",
    "ProcessMetrics",
    "RecordTimes",
    "ReplicaMetrics",
    "TopicPartition",
    "serving",
]
