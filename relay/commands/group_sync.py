"""`relay replicate --sync-groups`: the consumer groups' committed source offsets,
translated and committed for the same groups on the target cluster every
``--sync-interval`` while the replicator runs (and once at the end of ``--once``), so that
a failover resumes each group at the first record it had not processed even when the
source cluster is gone by then (docs/replication.md, "Failing consumers over").

What a round commits is :func:`relay.replication.group_sync.plan_sync`'s: only offsets of
copies the target has committed, never backwards unless the group went back on the
source, and nothing while the group has active members on the target.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from relay.errors import OffsetTranslationError, RelayError
from relay.kafka.offset_translation import KafkaOffsetTranslator
from relay.replication.group_sync import plan_sync
from relay.replication.translation import TranslatedOffset
from relay.runtime.clock import Clock, SystemClock
from relay.runtime.metrics import ReplicaMetrics
from relay.settings.replicate import ReplicateSettings

log = logging.getLogger(__name__)


class GroupTranslator(Protocol):
    """What a round asks of one group's offsets (:class:`KafkaOffsetTranslator`)."""

    def target_members(self) -> int: ...

    def translate_with_metadata(
        self, *, sync: bool = False
    ) -> tuple[list[TranslatedOffset], dict[tuple[str, int], str]]: ...

    def apply(self, rows: Iterable[TranslatedOffset]) -> list[TranslatedOffset]: ...

    def close(self) -> None: ...


class GroupSync:
    """One translator per group, kept for the run; :meth:`sync_once` is one round of
    every group, :meth:`follow` a round every ``--sync-interval`` until stopped."""

    def __init__(
        self,
        settings: ReplicateSettings,
        metrics: ReplicaMetrics,
        clock: Clock | None = None,
        translator: Callable[[ReplicateSettings, str], GroupTranslator] = KafkaOffsetTranslator,
    ) -> None:
        self._settings, self._metrics = settings, metrics
        self._clock = clock or SystemClock()
        self._translators: dict[str, GroupTranslator] = {}
        self._active: set[str] = set()  # groups last seen consuming on the target
        self._failing: dict[str, str] = {}  # group: the error its last round ended with
        self._thread: threading.Thread | None = None
        try:
            for group in settings.sync_groups:  # the replicator's own group is refused
                self._translators[group] = translator(settings, group)
        except RelayError:
            self.close()
            raise
        metrics.syncing(settings.sync_groups)

    def start(self, stop: threading.Event) -> None:
        """:meth:`follow` on a thread of its own; :meth:`close` waits for its round."""
        self._thread = threading.Thread(
            target=self.follow, args=(stop,), name="sync-groups", daemon=True
        )
        self._thread.start()

    def follow(self, stop: threading.Event) -> None:
        """A round every ``--sync-interval`` until ``stop`` is set; a round that fails
        (a cluster unreachable: the source gone, say) is logged and tried at the next."""
        log.info(
            "syncing the offsets of consumer group(s) %s to the target cluster every %g s",
            ", ".join(self._translators),
            self._settings.sync_interval_s,
        )
        while not stop.is_set():
            for group in self._translators:
                try:
                    self.sync(group)
                except RelayError as exc:
                    self._failed(group, exc)
            if self._clock.wait(self._settings.sync_interval_s, stop):
                break

    def sync_once(self) -> None:
        """One round of every group; an error ends it (``--once``)."""
        for group in self._translators:
            self.sync(group)

    def sync(self, group: str) -> int:
        """One round of ``group``: how many offsets it committed on the target."""
        translator = self._translators[group]
        if members := translator.target_members():
            self._skip(group, members)
            return 0
        self._metrics.group_sync_began(group)
        rows, metadata = translator.translate_with_metadata(sync=True)
        plan = plan_sync(rows, metadata)
        try:
            translator.apply(plan.commit)
        except OffsetTranslationError:  # a consumer joined on the target meanwhile
            self._skip(group, 1)
            return 0
        if group in self._active or group in self._failing:
            log.info("group %s: its offsets are synced to the target cluster again", group)
        self._active.discard(group)
        self._failing.pop(group, None)
        for how, shown in (("stays at %s, ahead of %s", plan.ahead), ("%s -> %s", plan.commit)):
            for row in shown:
                log.debug(
                    f"group %s: %s[%d] on the target: {how} (source offset %s)",
                    group,
                    row.target_topic,
                    row.partition,
                    row.current,
                    row.target_offset,
                    row.source_offset,
                )
        for row in plan.waiting:  # a continuous sync tries again next round
            log.log(
                logging.DEBUG if self._thread is not None else logging.WARNING,
                "group %s: %s[%d] is not replicated up to the group's offset %s yet: its "
                "offset on the target is left as it was",
                group,
                row.topic,
                row.partition,
                row.source_offset,
            )
        self._metrics.group_synced(group, len(plan.commit), len(plan.waiting))
        return len(plan.commit)

    def _skip(self, group: str, members: int) -> None:
        self._metrics.group_sync_skipped(group)
        if group not in self._active:
            self._active.add(group)
            log.warning(
                "group %s has %d active member(s) on the target cluster: its offsets there "
                "are left alone while it consumes there (said once)",
                group,
                members,
            )

    def _failed(self, group: str, exc: RelayError) -> None:
        if self._failing.get(group) != str(exc):
            log.warning("group %s: syncing its offsets failed, trying again: %s", group, exc)
        self._failing[group] = str(exc)

    def close(self) -> None:
        """Close the translators, once the thread's round has ended (it stops when the
        event :meth:`start` was given is set)."""
        if self._thread is not None:
            # A round takes a few requests, each within the Kafka timeouts.
            self._thread.join(4 * self._settings.target.request_timeout_s)
            if self._thread.is_alive():
                log.warning("the group sync did not stop in time; leaving it")
                return
        for translator in self._translators.values():
            translator.close()
