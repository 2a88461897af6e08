"""A ``publish`` span per Kafka transaction of events (:mod:`relay.runtime.tracing`).

The span starts when the transaction's records are sent and ends when it commits (status
unset) or aborts (status ERROR, with the reason); it links to the trace of each record
that carries a ``traceparent``. Transactions without records (a position kept alive, a
heartbeat) have none.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from relay.publishing.ports import PublisherDecorator, TransactionalPublisher
from relay.publishing.types import OutboxRecord
from relay.runtime import tracing

_TOPIC = attrgetter("topic")
_HEADERS = attrgetter("headers")


class TracedPublisher(PublisherDecorator):
    def __init__(self, inner: TransactionalPublisher, partition: int) -> None:
        super().__init__(inner)
        self._partition = partition
        self._open = tracing.NO_SPANS

    def _end(self, error: str | None = None) -> None:
        self._open, spans = tracing.NO_SPANS, self._open
        spans.end(error)

    def send(self, records: Sequence[OutboxRecord]) -> None:
        if records:
            self._end("superseded")  # a second send in one transaction: never, but close it
            self._open = tracing.start_publish_span(
                self._partition, set(map(_TOPIC, records)), list(map(_HEADERS, records))
            )
        try:
            self._inner.send(records)
        except Exception as exc:
            self._end(str(exc))
            raise

    def commit(self, position: int) -> None:
        try:
            self._inner.commit(position)
        except Exception as exc:
            self._end(str(exc))
            raise
        self._end()

    def abort(self) -> None:
        self._end("aborted")
        self._inner.abort()

    def reset(self) -> None:
        self._end("producer reset")
        self._inner.reset()

    def close(self) -> None:
        self._end("closed")
        self._inner.close()
