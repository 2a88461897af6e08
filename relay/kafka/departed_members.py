"""Ending at once the transaction a departed member of the positions group left open.

With one transaction per process (the default) every `relay run` process has a
transactional id of its own (``<prefix>-member-<random>``, or ``<prefix>-member-NAME``
with ``--member-id``). A
process killed with its transaction open leaves its records on the topic partitions it
wrote to, and its positions as a pending offset commit. Until the broker aborts that
transaction, after ``transaction.timeout.ms``, read_committed readers of those partitions
wait, and so does the member that takes the relay partitions over (its read of the
committed position waits for the pending commit). That member ends the wait, for each
relay partition it takes, before it reads the position::

    last committer   the partition's position as last committed, read without waiting
                     for a pending commit (read_uncommitted); its metadata names the
                     process that committed it (``member``: its transactional id)
    still a member?  the group's description: a member's ``client.id`` is its
                     transactional id. A member handed the partition over itself, after
                     its transaction ended, and is left alone
    fence            otherwise ``init_transactions`` under that id, once per process:
                     the broker aborts the transaction it left open at once, and fences
                     the process should it still run (paused past its session timeout,
                     it could not have committed anyway: its generation is stale)

A departed process that never committed the partition is not named by it: readers then
wait for the broker, as before. A process restarted under its ``--member-id`` while the
check runs may be fenced by it; it stops (exit 5, fenced) and is started again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from relay.kafka.admin import admin_client
from relay.kafka.errors import kafka_reason
from relay.kafka.positions import positions_consumer
from relay.runtime.stamps import read_fields
from relay.settings.relay import RelaySettings

log = logging.getLogger(__name__)

MEMBER_FIELD = "member"
"""The field of a position's metadata that names the process that committed it."""

Fence = Callable[[str], None]
"""Initialise transactions under a transactional id (the process's own producer
settings otherwise)."""


class DepartedMembers:
    """Finds the departed process a relay partition's position names, and fences it.
    ``last_committer``: the transactional id a partition's position names (None: none);
    ``members``: the transactional ids of the group's members now."""

    def __init__(
        self,
        own_id: str,
        fence: Fence,
        last_committer: Callable[[int], str | None],
        members: Callable[[], set[str]],
        group: str,
    ) -> None:
        self._own_id = own_id
        self._fence = fence
        self._last_committer = last_committer
        self._members = members
        self._group = group
        self._lock = threading.Lock()
        self._fenced: set[str] = set()

    def end_transaction_left_by(self, partition: int) -> None:
        """If ``partition``'s position was last committed by a process that is no longer
        a member of the positions group, fence it (its open transaction is aborted);
        a check that cannot be made is logged, and the broker's timeout left to act."""
        with self._lock:
            try:
                named = self._last_committer(partition)
                if named is None or named == self._own_id or named in self._fenced:
                    return
                if named in self._members():
                    return
                self._fence(named)
            except KafkaException as exc:
                log.warning(
                    "relay partition %d: could not end the transaction a departed member "
                    "may have left open (%s); read_committed readers wait for the broker "
                    "to abort it (transaction.timeout.ms)",
                    partition,
                    kafka_reason(exc),
                )
                return
            self._fenced.add(named)
        log.info(
            "relay partition %d: fenced %s, which committed its position last and is no "
            "longer a member of group %s: its open transaction, if any, is aborted",
            partition,
            named,
            self._group,
        )


class PositionsGroupView:
    """What :class:`DepartedMembers` reads, from Kafka: a position's last committer
    (read_uncommitted: a pending transactional commit is not waited for) and the
    positions group's members (each one's ``client.id`` is its transactional id)."""

    def __init__(self, settings: RelaySettings) -> None:
        self._settings = settings
        self._reader: Consumer | None = None

    def last_committer(self, partition: int) -> str | None:
        if self._reader is None:
            self._reader = positions_consumer(self._settings, stable=False)
        wanted = TopicPartition(self._settings.positions_topic, partition)
        found = self._reader.committed([wanted], timeout=self._settings.kafka.request_timeout_s)
        if not found or found[0].error is not None or found[0].offset < 0:
            return None
        return read_fields(found[0].metadata).get(MEMBER_FIELD)

    def members(self) -> set[str]:
        admin = admin_client(self._settings.kafka)
        group = self._settings.group
        timeout = self._settings.kafka.request_timeout_s
        described = admin.describe_consumer_groups([group], request_timeout=timeout)
        return {m.client_id for m in described[group].result().members or ()}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
