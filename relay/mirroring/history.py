"""What a mirrored table keeps besides the mapped columns: its history mode and its
metadata columns, as read from the mapping.

::

    history = "scd2"                      # or "changelog"; default "current"
    [tables.history_columns]              # optional: other names for the mode's columns
    valid_from = "valid_from"             # scd2: valid_from, valid_to, is_current
    op = "op"                             # changelog: the operation (upsert / delete)
    [tables.metadata]                     # table column = where the record was
    kafka_ts = "kafka_timestamp"          # also topic, partition, offset, applied_at
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

from relay.errors import ConfigurationError

HistoryMode = Literal["current", "scd2", "changelog"]
MetadataField = Literal["kafka_timestamp", "topic", "partition", "offset", "applied_at"]

HISTORY_MODES: tuple[HistoryMode, ...] = ("current", "scd2", "changelog")
METADATA_FIELDS: tuple[MetadataField, ...] = (
    "kafka_timestamp",
    "topic",
    "partition",
    "offset",
    "applied_at",
)
_MODE_COLUMNS: dict[HistoryMode, tuple[str, ...]] = {
    "current": (),
    "scd2": ("valid_from", "valid_to", "is_current"),
    "changelog": ("op",),
}


@dataclass(frozen=True, slots=True)
class HistoryMapping:
    """``current``: one row per key (the latest version). ``scd2``: one row per version,
    valid from the record's Kafka timestamp until the next version's (or the tombstone's),
    the latest one current. ``changelog``: one row per applied record (``op`` upsert or
    delete)."""

    mode: HistoryMode = "current"
    valid_from: str = "valid_from"
    valid_to: str = "valid_to"
    is_current: str = "is_current"
    op: str = "op"

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """(column, role) of the columns the mode adds."""
        return tuple((getattr(self, role), role) for role in _MODE_COLUMNS[self.mode])


def parse_history(raw_mode: object, raw_columns: object, where: str) -> HistoryMapping:
    if raw_mode is None:
        raw_mode = "current"
    if raw_mode not in HISTORY_MODES:
        raise ConfigurationError(
            f"{where}: history must be one of {', '.join(HISTORY_MODES)}, got {raw_mode!r}"
        )
    mode: HistoryMode = raw_mode
    if raw_columns is None:
        return HistoryMapping(mode)
    allowed = _MODE_COLUMNS[mode]
    if not isinstance(raw_columns, dict):
        raise ConfigurationError(f'{where}: history_columns: expected role = "column" pairs')
    names: dict[str, str] = {}
    for role, column in raw_columns.items():
        if role not in allowed:
            known = ", ".join(allowed) or "none"
            raise ConfigurationError(
                f"{where}: history_columns: {role!r} is not a column of history mode {mode} "
                f"(its columns: {known})"
            )
        if not isinstance(column, str) or not column:
            raise ConfigurationError(f"{where}: history_columns: {role} must be a column name")
        names[role] = column
    return HistoryMapping(mode, **names)


def parse_metadata(raw: object, where: str) -> tuple[tuple[str, MetadataField], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigurationError(f'{where}: metadata: expected column = "field" pairs')
    result: list[tuple[str, MetadataField]] = []
    for column, field in raw.items():
        if field not in METADATA_FIELDS:
            raise ConfigurationError(
                f"{where}: metadata: {column} = {field!r} is not one of "
                f"{', '.join(METADATA_FIELDS)}"
            )
        result.append((column, cast(MetadataField, field)))
    return tuple(result)
