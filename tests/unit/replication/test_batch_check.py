"""A batch's checks (both topics' ids, the position's owner) run while its copies are sent,
and a batch that fails them is aborted, never committed (relay.replication.batch_check)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from relay.errors import ReplicaPositionError
from relay.replication.types import SourceRecord
from tests.fakes.replication import MemoryWriter
from tests.unit.replication.test_position_check import Ids, copied, grow, make


class SlowIds(Ids):
    """Topic ids whose source side answers only once the batch's copies are being sent."""

    def __init__(self, sending: threading.Event) -> None:
        super().__init__()
        self.sending = sending
        self.checking = False

    def source(self, topic: str, since: float) -> str | None:
        if self.checking:
            assert self.sending.wait(10), "the check waited for the copies that waited for it"
        return super().source(topic, since)


def sending_writer(writer: MemoryWriter, sending: threading.Event) -> None:
    send = writer.send

    def signalled(records: Sequence[SourceRecord]) -> None:
        sending.set()
        send(records)

    writer.send = signalled  # type: ignore[method-assign]


def test_the_checks_run_while_the_copies_are_sent() -> None:
    source, target, _ = copied()
    sending = threading.Event()
    ids = SlowIds(sending)
    replicator = make(source, target, ids)
    replicator.start()
    assert target.last_writer is not None
    sending_writer(target.last_writer, sending)
    grow(source, b"x", b"y")
    ids.checking = True
    batch = replicator.copy_batch()
    assert batch is not None and batch.records == 2
    assert [r.value for r in target.copies[-2:]] == [b"x", b"y"]
    replicator.close()


def test_a_batch_failing_its_checks_is_aborted_not_committed() -> None:
    source, target, ids = copied()
    replicator = make(source, target, ids)
    replicator.start()
    writer = target.last_writer
    assert writer is not None
    grow(source, b"x", b"y")
    ids.ids["orders"] = "S2"
    with pytest.raises(ReplicaPositionError, match="while it was copied"):
        replicator.copy_batch()
    assert (writer.aborts, writer.pending, len(target.copies)) == (1, None, 4)
    replicator.close()


class MeetingIds(Ids):
    """Topic ids whose source side answers only once the target side was asked too."""

    def __init__(self) -> None:
        super().__init__()
        self.target_asked = threading.Event()
        self.checking = False

    def source(self, topic: str, since: float) -> str | None:
        if self.checking:
            assert self.target_asked.wait(10), "the target was asked only after the source"
        return super().source(topic, since)

    def target(self, topic: str, since: float) -> str | None:
        self.target_asked.set()
        return super().target(topic, since)


def test_both_topics_are_described_at_once() -> None:
    source, target, _ = copied()
    ids = MeetingIds()
    replicator = make(source, target, ids)
    replicator.start()
    grow(source, b"x", b"y")
    ids.target_asked.clear()
    ids.checking = True
    batch = replicator.copy_batch()
    assert batch is not None and batch.records == 2
    replicator.close()
