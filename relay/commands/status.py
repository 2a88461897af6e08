"""``relay status``: where the outbox and the mirror stand, for operators and monitoring.

Read-only: the positions are read as ``relay positions show`` reads them (a consumer that
never joins the positions group and fences nothing), the database without taking a lock,
and nothing is created (not even a missing positions topic). The checks
(:func:`failed_checks`) are pure: ``--max-lag`` and ``--max-age`` against a report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from relay.commands import groups
from relay.commands.mirror import lag_report, timed
from relay.commands.startup import for_database, select_partitions
from relay.errors import MigrationsNotAppliedError
from relay.kafka.admin import admin_client, check_broker
from relay.kafka.positions import read_positions
from relay.kafka.record_stream import KafkaRecordStream
from relay.mirroring.types import LagRow
from relay.postgres.engine import Database, open_database
from relay.postgres.migrations import SchemaRevision, schema_revision
from relay.postgres.outbox_partitions import relay_partitions
from relay.postgres.outbox_status import (
    MirrorStoredOffset,
    OutboxPartitionStatus,
    mirror_stored_offsets,
    outbox_status,
)
from relay.settings.mirror import MirrorSettings, load_mirror_selection
from relay.settings.relay import RelaySettings
from relay.settings.spec import Given
from relay.settings.status import OUTPUTS, STATUS

__all__ = ["OUTPUTS"]


@dataclass(frozen=True, slots=True)
class MirrorPartitionStatus:
    group: str
    topic: str
    partition: int
    next_offset: int | None  # stored in mirror_offsets (None: nothing applied yet)
    last_stable_offset: int
    lag: int  # records (and transaction markers) committed in Kafka, not yet applied
    dead_letters: int
    lag_s: float | None = None  # the oldest record not applied: its age (LagRow.lag_s)


@dataclass(frozen=True, slots=True)
class StatusReport:
    checked_at: datetime  # the database's clock, which the ages are measured with
    schema: SchemaRevision
    positions_group: str
    outbox: tuple[OutboxPartitionStatus, ...]
    mirror: tuple[MirrorPartitionStatus, ...]  # empty: no mirror given or stored


@dataclass(frozen=True, slots=True)
class MirrorScope:
    """Which mirror partitions to report: with ``settings`` (a mapping), every mapped
    partition of its group (:func:`~relay.commands.mirror.lag_report`); without, the
    partitions stored in mirror_offsets, of ``group`` and ``topics`` when given."""

    settings: MirrorSettings | None = None
    group: str | None = None
    topics: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class StatusOptions:
    output: str = "text"  # one of OUTPUTS
    max_lag: int | None = None  # pending rows per relay partition, records per mirror one
    max_age_s: float | None = None  # the oldest pending row's age


def status(
    settings: RelaySettings,
    partitions: Sequence[int] | None = None,
    mirror: MirrorScope | None = None,
) -> StatusReport:
    """The report; raises like the other commands when a server cannot be reached or the
    schema is one this package cannot run on."""
    url = settings.database_url
    database = open_database(url, pool_size=1, application_name="relay-status")
    try:
        with database.connect("connecting"):
            pass
        schema = schema_revision(database)
        if (problem := schema.problem()) is not None:
            raise MigrationsNotAppliedError(problem)
        selected = select_partitions(partitions, relay_partitions(database))
        settings, _ = for_database(settings, database)
        check_broker(admin_client(settings.kafka), settings.kafka)
        # Kafka first: a row published in between counts as pending, never the reverse.
        found = read_positions(settings, selected)
        checked_at, outbox = outbox_status(database, {p: found[p].position for p in selected})
        mirrored = _mirror_status(database, settings, mirror or MirrorScope())
    finally:
        database.dispose()
    return StatusReport(checked_at, schema, settings.group, tuple(outbox), mirrored)


def _mirror_status(
    database: Database, settings: RelaySettings, scope: MirrorScope
) -> tuple[MirrorPartitionStatus, ...]:
    if scope.settings is not None:
        mirror = groups.mirror_settings(scope.settings, database, announce=False)
        group = mirror.group
        dead = {
            (s.topic, s.partition): s.dead_letters for s in mirror_stored_offsets(database, group)
        }
        return tuple(
            _mirror_row(group, row, dead.get((row.topic, row.partition), 0))
            for row in lag_report(mirror, seconds=True)
        )
    stored = [
        s
        for s in mirror_stored_offsets(database, scope.group)
        if scope.topics is None or s.topic in scope.topics
    ]
    if not stored:
        return ()
    return tuple(
        _mirror_row(s.group, row, s.dead_letters)
        for s, row in zip(stored, _lag_rows(settings, stored), strict=True)
    )


def _lag_rows(settings: RelaySettings, stored: Sequence[MirrorStoredOffset]) -> list[LagRow]:
    # A consumer that never joins a group (it assigns, to read the oldest records not
    # applied): its group id is not used.
    stream = KafkaRecordStream(settings.kafka, stored[0].group)
    try:
        stable = stream.last_stable_offsets(sorted({(s.topic, s.partition) for s in stored}))
        rows = [
            LagRow(s.topic, s.partition, s.next_offset, stable[(s.topic, s.partition)])
            for s in stored
        ]
        groups: dict[str, list[int]] = {}  # groups may store the same partition: one each
        for n, s in enumerate(stored):
            groups.setdefault(s.group, []).append(n)
        for rows_of_group in groups.values():
            times = timed(stream, [rows[n] for n in rows_of_group])
            for n, row in zip(rows_of_group, times, strict=True):
                rows[n] = row
        return rows
    finally:
        stream.close()


def _mirror_row(group: str, row: LagRow, dead_letters: int) -> MirrorPartitionStatus:
    return MirrorPartitionStatus(
        group,
        row.topic,
        row.partition,
        row.next_offset,
        row.last_stable_offset,
        row.lag,
        dead_letters,
        row.lag_s,
    )


def failed_checks(report: StatusReport, options: StatusOptions) -> list[str]:
    """One line per breach of ``--max-lag`` or ``--max-age`` (none: every check passed)."""
    failed: list[str] = []
    max_lag, max_age = options.max_lag, options.max_age_s
    for p in report.outbox:
        if max_lag is not None and p.pending > max_lag:
            rows = "row" if p.pending == 1 else "rows"
            failed.append(
                f"relay partition {p.partition}: {p.pending:,} {rows} pending "
                f"> --max-lag {max_lag:,}"
            )
        age = p.oldest_pending_age_s
        if max_age is not None and age is not None and age > max_age:
            failed.append(
                f"relay partition {p.partition}: oldest pending row is {age:,.0f} s old "
                f"> --max-age {max_age:g}"
            )
    for m in report.mirror:
        if max_lag is not None and m.lag > max_lag:
            failed.append(
                f"mirror {m.group} {m.topic}[{m.partition}]: lag {m.lag:,} > --max-lag {max_lag:,}"
            )
    return failed


def load_status_options(
    flags: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> StatusOptions:
    """``output``, ``max_lag`` and ``max_age_s`` from the flags, else ``RELAY_STATUS_*``."""
    return StatusOptions(**Given(flags, environ).values(STATUS))


def load_mirror_scope(
    flags: Mapping[str, object],
    mirror_settings: Callable[[], MirrorSettings],
    environ: Mapping[str, str] | None = None,
) -> MirrorScope:
    """With a mapping (``--mapping``, ``RELAY_MIRROR_CONFIG``), the mirror's settings as
    ``mirror_settings`` loads them; without, the group and topics (``RELAY_MIRROR_GROUP``,
    ``RELAY_MIRROR_TOPICS``) filter mirror_offsets, when given."""
    selection = load_mirror_selection(flags, environ)
    if selection.mapping_path:
        return MirrorScope(settings=mirror_settings())
    return MirrorScope(group=selection.group, topics=selection.topics)
