"""The HTTP server of ``/metrics``, ``/healthz`` and ``/readyz``."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.exposition import choose_encoder

from relay.errors import ConfigurationError
from relay.runtime.metrics.base import ProcessMetrics

log = logging.getLogger(__name__)


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
