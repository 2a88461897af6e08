"""The Prometheus metrics of `relay run` and `relay mirror`, and the HTTP server of
``/metrics``, ``/healthz`` and ``/readyz`` (docs/operations.md, "Metrics and health").

Every metric name is declared here, once, on a registry of the process's own (never
prometheus_client's global one, so that a test can hold several). The cores never import
this module: they tell an observer what they do (``RelayObserver`` in
relay.publishing.ports, ``LoopObserver`` in relay.mirroring.observer).
:class:`OutboxMetrics` and :class:`MirrorMetrics` are those observers; relay.commands
hands them in and adds what only it sees (the start-up checks, fencing, a partition that
stops, the queries asked at scrape time). prometheus_client is imported nowhere else (a
contract in pyproject.toml).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Generic, NamedTuple, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from relay.errors import ConfigurationError, RelayError
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.health import Readiness, State

log = logging.getLogger(__name__)

QUERY_EVERY_S = 10.0
"""The least time between two scrape-time queries (pending rows, last stable offsets)."""

BATCH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MIRROR_CONSUMER = "mirror consumer"

K = TypeVar("K")
V = TypeVar("V")
TopicPartition = tuple[str, int]


class Backlog(NamedTuple):
    """A relay partition as the database sees it."""

    pending: int  # rows above the partition's position
    dead_letters: int  # rows in outbox_dead_letters


class _Sampled(Generic[K, V]):
    """A query asked at scrape time, at most every QUERY_EVERY_S (sooner only about keys
    it was not asked about yet); its last answer in between. A failed query is logged and
    leaves the series out until the next one."""

    def __init__(self, what: str, clock: Clock) -> None:
        self._what = what
        self._clock = clock
        self._lock = threading.Lock()
        self._query: Callable[[Sequence[K]], Mapping[K, V]] | None = None
        self._answer: Mapping[K, V] = {}
        self._asked: set[K] = set()
        self._asked_at = 0.0

    def use(self, query: Callable[[Sequence[K]], Mapping[K, V]] | None) -> None:
        """Ask ``query`` from now on; None: nothing (after a query under way has ended,
        so that what it uses may be closed then)."""
        with self._lock:
            self._query, self._answer, self._asked = query, {}, set()

    def get(self, keys: Collection[K]) -> Mapping[K, V]:
        with self._lock:
            now = self._clock.monotonic()
            due = not set(keys) <= self._asked or now - self._asked_at >= QUERY_EVERY_S
            if self._query is not None and keys and due:
                self._asked, self._asked_at = set(keys), now
                try:
                    self._answer = dict(self._query(list(keys)))
                except RelayError as exc:
                    log.warning("metrics: %s failed: %s", self._what, exc)
                    self._answer = {}
            return self._answer


class ProcessMetrics:
    """A registry of the process's own and its readiness, both served by :func:`serving`;
    ``relay_ready`` mirrors ``/readyz`` for alerting."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.registry = CollectorRegistry()
        self.readiness = Readiness()
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._declare()
        self.registry.register(self)

    def _declare(self) -> None:
        """Declare the command's metrics on :attr:`registry`."""

    def collect(self) -> Iterator[Metric]:
        """The series computed at scrape time (a prometheus_client Collector)."""
        ready = GaugeMetricFamily("relay_ready", "1 while /readyz answers 200, else 0")
        ready.add_metric([], 1.0 if self.readiness.check()[0] else 0.0)
        yield ready


class OutboxMetrics(ProcessMetrics):
    """`relay run`'s metrics and readiness: the RelayObserver of its relay partitions."""

    def _declare(self) -> None:
        counter = partial(Counter, registry=self.registry, labelnames=["partition"])
        self._published = counter(
            "relay_outbox_records_published", "Outbox rows published (committed in Kafka)"
        )
        self._committed = counter(
            "relay_outbox_transactions_committed",
            "Kafka transactions committed: batches, and keep-alives of an idle position",
        )
        self._aborted = counter("relay_outbox_transactions_aborted", "Kafka transactions aborted")
        self._fenced = counter(
            "relay_outbox_fencings", "Relay partitions fenced: another relay instance took over"
        )
        self._retries = counter(
            "relay_outbox_retries", "Batches and start-ups that failed and are tried again"
        )
        self._dead_letters = counter(
            "relay_outbox_dead_letters", "Outbox rows Kafka refused, moved to outbox_dead_letters"
        )
        self._position = Gauge(
            "relay_outbox_position",
            "The position committed in Kafka: the last published seq",
            registry=self.registry,
            labelnames=["partition"],
        )
        self._duration = Histogram(
            "relay_outbox_batch_duration_seconds",
            "One batch: fetching its rows, sending them and committing the Kafka transaction",
            registry=self.registry,
            buckets=BATCH_BUCKETS_S,
        )
        self._counters = (
            self._published,
            self._committed,
            self._aborted,
            self._fenced,
            self._retries,
            self._dead_letters,
        )
        self._positions: dict[int, int] = {}
        self._backlog: _Sampled[int, Backlog] = _Sampled("reading the pending rows", self._clock)

    def expect(
        self,
        partitions: Iterable[int],
        backlog: Callable[[Mapping[int, int]], Mapping[int, Backlog]],
        *,
        shared: bool = False,
    ) -> None:
        """The start-up checks passed: ``partitions`` must run to be ready (``shared``:
        only those the members group gives this process, as they start). ``backlog``
        answers per relay partition for its position (asked at scrape time)."""
        names = []
        for partition in partitions:
            names.append(_partition(partition))
            for counter in self._counters:
                counter.labels(str(partition))  # a 0 from the start, for rate() and alerts
        self.readiness.checked(() if shared else names)
        self._backlog.use(lambda _partitions: backlog(self._known_positions()))

    def _known_positions(self) -> dict[int, int]:
        with self._lock:
            return dict(self._positions)

    # -- RelayObserver (relay.publishing.ports) ----------------------------------------

    def running(self, partition: int, position: int) -> None:
        with self._lock:
            self._positions[partition] = position
        self._position.labels(str(partition)).set(position)
        self.readiness.set(_partition(partition), State.RUNNING)

    def transaction(self, partition: int, committed: bool) -> None:
        (self._committed if committed else self._aborted).labels(str(partition)).inc()

    def published(self, partition: int, records: int, seconds: float) -> None:
        self._published.labels(str(partition)).inc(records)
        self._duration.observe(seconds)

    def retrying(self, partition: int) -> None:
        self._retries.labels(str(partition)).inc()
        self.readiness.set(_partition(partition), State.RETRYING)

    def dead_lettered(self, partition: int, rows: int) -> None:
        self._dead_letters.labels(str(partition)).inc(rows)

    # -- what only relay.commands sees ------------------------------------------------

    def fenced(self, partition: int) -> None:
        self._fenced.labels(str(partition)).inc()

    def stopped(self, partition: int) -> None:
        self.readiness.set(_partition(partition), State.STOPPED)

    def released(self, partition: int) -> None:
        """Another member of the group publishes ``partition`` now (or will)."""
        self.readiness.forget(_partition(partition))
        with self._lock:
            self._positions.pop(partition, None)

    def collect(self) -> Iterator[Metric]:
        yield from super().collect()
        pending = GaugeMetricFamily(
            "relay_outbox_pending_rows",
            f"Committed outbox rows above the position (asked at most every {QUERY_EVERY_S:g} s)",
            labels=["partition"],
        )
        dead = GaugeMetricFamily(
            "relay_outbox_dead_letter_rows",
            f"Rows in outbox_dead_letters (asked at most every {QUERY_EVERY_S:g} s)",
            labels=["partition"],
        )
        for partition, found in sorted(self._backlog.get(self._known_positions()).items()):
            pending.add_metric([str(partition)], found.pending)
            dead.add_metric([str(partition)], found.dead_letters)
        yield pending
        yield dead


class MirrorMetrics(ProcessMetrics):
    """`relay mirror`'s metrics and readiness: the LoopObserver of its consume loop."""

    def _declare(self) -> None:
        counter = partial(Counter, registry=self.registry, labelnames=["topic", "partition"])
        self._applied = counter(
            "relay_mirror_records_applied", "Records applied to the mirrored tables"
        )
        self._dead_letters = counter(
            "relay_mirror_dead_letters", "Records moved to mirror_dead_letters"
        )
        self._retries = Counter(
            "relay_mirror_retries",
            "Database calls that failed and are tried again, and batches waiting for a record "
            "to heal",
            registry=self.registry,
        )
        self._stored: dict[TopicPartition, int | None] = {}  # owned partitions' next offsets
        self._stable: _Sampled[TopicPartition, int] = _Sampled(
            "reading the last stable offsets", self._clock
        )

    def started(
        self, stable: Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]] | None
    ) -> None:
        """The start-up checks passed and the consumer runs. ``stable`` answers the last
        stable offsets for the lag (asked at scrape time); None: no lag."""
        self._stable.use(stable)
        self.readiness.checked([MIRROR_CONSUMER])
        self.readiness.set(MIRROR_CONSUMER, State.RUNNING)

    def stopped(self) -> None:
        self.readiness.set(MIRROR_CONSUMER, State.STOPPED)
        self._stable.use(None)

    # -- LoopObserver (relay.mirroring.observer) --------------------------------------

    def positioned(self, offsets: Mapping[TopicPartition, int | None]) -> None:
        with self._lock:
            self._stored.update(offsets)
        for topic, partition in offsets:
            self._applied.labels(topic, str(partition))
            self._dead_letters.labels(topic, str(partition))

    def revoked(self, partitions: Sequence[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._stored.pop(tp, None)

    def applied(
        self, tp: TopicPartition, records: int, dead_letters: int, next_offset: int
    ) -> None:
        with self._lock:
            if tp in self._stored:
                self._stored[tp] = next_offset
        self._applied.labels(tp[0], str(tp[1])).inc(records)
        self._dead_letters.labels(tp[0], str(tp[1])).inc(dead_letters)
        self.readiness.set(MIRROR_CONSUMER, State.RUNNING)

    def retrying(self) -> None:
        self._retries.inc()
        self.readiness.set(MIRROR_CONSUMER, State.RETRYING)

    def resumed(self) -> None:
        self.readiness.set(MIRROR_CONSUMER, State.RUNNING)

    def collect(self) -> Iterator[Metric]:
        yield from super().collect()
        lag = GaugeMetricFamily(
            "relay_mirror_lag_records",
            "Last stable offset minus the stored offset, per owned partition (the last "
            f"stable offsets asked at most every {QUERY_EVERY_S:g} s)",
            labels=["topic", "partition"],
        )
        with self._lock:
            stored = dict(self._stored)
        stable = self._stable.get(stored.keys())
        for tp in sorted(stored.keys() & stable.keys()):
            lag.add_metric([tp[0], str(tp[1])], max(0, stable[tp] - (stored[tp] or 0)))
        yield lag


def _partition(partition: int) -> str:
    return f"relay partition {partition}"


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on a small threading HTTP server in a
    daemon thread. ``port`` 0 takes a free one (:attr:`port` says which)."""

    def __init__(self, metrics: ProcessMetrics, host: str, port: int) -> None:
        server_type = _IPv6Server if ":" in host else ThreadingHTTPServer
        try:
            self._server = server_type((host, port), _handler(metrics))
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {host}:{port} (RELAY_METRICS_HOST/_PORT): "
                f"{exc.strerror or exc}"
            ) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="relay-metrics", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


@contextmanager
def serving(metrics: ProcessMetrics, host: str, port: int | None) -> Iterator[None]:
    """Serve ``metrics`` on ``host:port`` while the block runs; nothing when ``port`` is
    None (RELAY_METRICS_PORT unset)."""
    if port is None:
        yield
        return
    server = MetricsServer(metrics, host, port)
    log.info("serving /metrics, /healthz and /readyz on %s:%d", host, server.port)
    try:
        yield
    finally:
        server.close()


def _handler(metrics: ProcessMetrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.partition("?")[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._answer(200, encoder(metrics.registry), content_type)
            elif path == "/healthz":
                self._answer(200, b"alive\n")
            elif path == "/readyz":
                ready, why = metrics.readiness.check()
                self._answer(200 if ready else 503, f"{why}\n".encode())
            else:
                self._answer(404, b"not found: try /metrics, /healthz or /readyz\n")

        def _answer(
            self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8"
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler
