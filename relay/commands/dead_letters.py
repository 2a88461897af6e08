"""``relay dead-letters``: list, show, replay and discard the dead letters of the outbox
(``outbox_dead_letters``) and of the mirror (``mirror_dead_letters``), I5.

A replay goes through the normal path:

- outbox: a key's dead letters together, in one database transaction, in their order
  (a replay of one of them takes the others of its key along: while one exists, the key's
  later rows follow it to the dead letters, I2): each row is inserted again with the write
  API's INSERT (same topic, key, value, event type and headers) and its dead letter
  deleted; the relay publishes them once, as new events with new ids and positions;
- mirror (one dead letter per database transaction): the stored raw record is decoded
  with the mapping and applied with the mirror's version-guarded upserts (an older
  version never overwrites a newer row), and the dead letter deleted, together.

A replay that fails again keeps the dead letter, with the new error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

from relay.errors import ConfigurationError, DeadLetterError, InvalidEventError
from relay.mirroring.decode import TopicDecoder
from relay.mirroring.mapping import load_mapping
from relay.mirroring.ports import ValueDecoder
from relay.mirroring.types import Op, RecordHeaders, ResolvedTable
from relay.postgres.dead_letters import (
    DeadLetterRow,
    DeadLetterTables,
    MirrorDeadLetter,
    MirrorReplayer,
    OutboxDeadLetter,
    Replayed,
    Selection,
    Source,
)
from relay.postgres.engine import Database, open_database
from relay.postgres.migrations import check_schema
from relay.postgres.mirror_catalog import resolve_tables
from relay.postgres.outbox_replay import key_groups, replay_together
from relay.publishing.events import decode_headers
from relay.runtime.secrets import Secret
from relay.settings.mirror import load_mirror_selection
from relay.settings.registry import URL, RegistrySettings, load_registry_settings
from relay.settings.spec import Given

if TYPE_CHECKING:  # commands use the PostgreSQL adapter's handle, never SQLAlchemy itself
    import sqlalchemy as sa

__all__ = [
    "DeadLetterRow",
    "Discarded",
    "MirrorDeadLetter",
    "MirrorOptions",
    "OutboxDeadLetter",
    "Replayed",
    "Selection",
    "Source",
    "describe",
    "discard",
    "list_dead_letters",
    "load_mirror_options",
    "replay",
    "replay_mapping",
    "replay_selection",
    "show",
    "shown_bytes",
    "shown_time",
]

SHOWN_BYTES = 200  # of a key, value or header, unless --full


@dataclass(frozen=True, slots=True)
class MirrorOptions:
    """The mirror's part: its mapping (needed to replay) and a consumer group to select."""

    mapping_path: str | None = None
    group: str | None = None
    registry: RegistrySettings | None = None  # for tables of a schema registry format


@dataclass(frozen=True, slots=True)
class Discarded:
    deleted: tuple[int, ...]
    missing: tuple[int, ...]  # ids asked for that are not dead letters


def load_mirror_options(
    flags: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> MirrorOptions:
    """The mapping (``--mapping``, ``RELAY_MIRROR_CONFIG``) and the group (``--group``,
    ``RELAY_MIRROR_GROUP``) where given: flags win, as for ``relay mirror``."""
    selection = load_mirror_selection(flags, environ)
    registry = load_registry_settings(flags, environ) if Given(flags, environ).origin(URL) else None
    return MirrorOptions(selection.mapping_path, selection.group, registry)


@contextmanager
def _tables(url: Secret) -> Iterator[tuple[Database, DeadLetterTables]]:
    database = open_database(url, pooled=False, application_name="relay-dead-letters")
    try:
        with database.connect("connecting"):
            pass
        check_schema(database)
        yield database, DeadLetterTables(database)
    finally:
        database.dispose()


def list_dead_letters(
    url: Secret, source: Source, selection: Selection, limit: int | None = None
) -> list[DeadLetterRow]:
    """The selected dead letters, oldest first, at most ``limit``."""
    with _tables(url) as (_, tables):
        return tables.rows(source, selection, limit)


def show(url: Secret, source: Source, dead_letter_id: int) -> OutboxDeadLetter | MirrorDeadLetter:
    """One dead letter, everything stored with it."""
    with _tables(url) as (_, tables):
        found = (
            tables.outbox_letter(dead_letter_id)
            if source == "outbox"
            else tables.mirror_letter(dead_letter_id)
        )
    if found is None:
        raise DeadLetterError(f"there is no {source} dead letter {dead_letter_id}")
    return found


def replay(
    url: Secret, source: Source, selection: Selection, mirror: MirrorOptions | None = None
) -> list[Replayed]:
    """Replay the selected dead letters, each in a transaction of its own, in the order
    their records were first written; ids asked for that are not dead letters come back
    with ``found`` False."""
    mapping_path = replay_mapping(source, mirror)
    with _tables(url) as (database, tables):
        ids = tables.ids(source, selection)
        missing = [Replayed(i, found=False) for i in _missing(selection, ids)]
        if not ids:
            return missing
        if mapping_path is None:
            replayed = [
                result
                for group in key_groups(database, ids)
                for result in replay_together(database, group, outbox_refusal)
            ]
            return replayed + missing
        mapped, reflected = _mapped_tables(database, mapping_path)
        replayer = MirrorReplayer(database, mapped, reflected)
        decoder = None
        if mirror is not None and any(t.mapping.value_format != "json" for t in mapped):
            decoder = _decoder(mirror.registry)
        decoders: dict[str, TopicDecoder] = {}  # each topic's row builders compiled once
        operations = partial(mirror_operations, mapped, decoder=decoder, decoders=decoders)
        return [replayer.replay(i, operations) for i in ids] + missing


def replay_selection(url: Secret, source: Source, selection: Selection) -> Selection:
    """What a replay of ``selection`` replays: for the outbox, the selected dead letters
    with every other dead letter of their keys (a key's go back together, in order)."""
    if source != "outbox":
        return selection
    with _tables(url) as (database, tables):
        ids = tables.ids(source, selection)
        widened = [i for group in key_groups(database, ids) for i in group] if ids else []
    if set(widened) == set(ids):
        return selection
    return Selection(tuple(sorted({*widened, *(selection.ids or ())})))


def discard(url: Secret, source: Source, selection: Selection) -> Discarded:
    """Delete the selected dead letters, in one transaction."""
    with _tables(url) as (_, tables):
        deleted = tables.discard(source, selection)
    return Discarded(tuple(deleted), tuple(_missing(selection, deleted)))


def _missing(selection: Selection, found: Sequence[int]) -> list[int]:
    return sorted(set(selection.ids or ()) - set(found))


def replay_mapping(source: Source, mirror: MirrorOptions | None) -> str | None:
    """The mapping a replay of ``source``'s dead letters needs (outbox: none)."""
    if source == "outbox":
        return None
    if mirror is None or mirror.mapping_path is None:
        raise ConfigurationError(
            "replaying the mirror's dead letters needs its mapping: set RELAY_MIRROR_CONFIG "
            "or --mapping (the file `relay mirror` runs with)"
        )
    return mirror.mapping_path


def _mapped_tables(
    database: Database, mapping_path: str
) -> tuple[tuple[ResolvedTable, ...], dict[str, sa.Table]]:
    return resolve_tables(database, load_mapping(mapping_path))


def outbox_refusal(letter: OutboxDeadLetter) -> str | None:
    """Why the dead letter cannot go back to the outbox as it is (None: it can): headers
    that cannot become Kafka headers would only be dead-lettered again."""
    try:
        decode_headers(letter.headers)
    except InvalidEventError as exc:
        return str(exc)
    return None


def _decoder(registry: RegistrySettings | None) -> ValueDecoder:
    if registry is None:
        raise ConfigurationError(
            "the mapping has a schema registry format: set RELAY_SCHEMA_REGISTRY_URL"
            " (or --schema-registry-url) to replay its dead letters"
        )
    from relay.kafka.schema_decoding import registry_decoder  # confluent's registry extra

    return registry_decoder(registry)


def mirror_operations(
    tables: Sequence[ResolvedTable],
    letter: MirrorDeadLetter,
    decoder: ValueDecoder | None = None,
    decoders: dict[str, TopicDecoder] | None = None,
) -> Sequence[Op] | str:
    """The record's row operations, as the mirror decodes it, or why there are none.
    ``decoders``: each topic's decoder, kept there for the next letter of the topic."""
    taking = [t for t in tables if letter.topic in t.mapping.topics]
    if not taking:
        return f"topic {letter.topic} is not in the mirror's mapping"
    decoders = {} if decoders is None else decoders
    if letter.topic not in decoders:
        decoders[letter.topic] = TopicDecoder(taking, decoder)
    decoded = decoders[letter.topic].decode(letter.record())
    if decoded.error is not None:
        return decoded.error
    if decoded.skipped:
        return "no mapped table takes the record (its event-type header)"
    return decoded.ops


def shown_bytes(value: bytes | None, full: bool = False, limit: int = SHOWN_BYTES) -> str:
    """Bytes shown safely on one line: UTF-8 text as it is (quoted and escaped when it
    holds control characters), anything else as hex; cut after ``limit`` characters (hex:
    digits) unless ``full``."""
    if value is None:
        return "(null)"
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        cut = not full and 2 * len(value) > limit
        shown = "hex " + (value[: limit // 2] if cut else value).hex()
    else:
        text = text if text.isprintable() else repr(text)
        cut = not full and len(text) > limit
        shown = text[:limit] if cut else text
    return f"{shown}... ({len(value):,} bytes; --full shows all)" if cut else shown


def describe(
    letter: OutboxDeadLetter | MirrorDeadLetter, full: bool = False
) -> list[tuple[str, str]]:
    """Everything stored with the dead letter, as (name, text) lines."""
    if isinstance(letter, OutboxDeadLetter):
        return [
            ("id", str(letter.id)),
            ("outbox id", str(letter.outbox_id)),
            ("relay partition", str(letter.partition)),
            ("seq", str(letter.seq)),
            ("topic", letter.topic),
            ("key", shown_bytes(letter.key, full)),
            ("value", shown_bytes(letter.value, full)),
            ("event type", "(none)" if letter.event_type is None else letter.event_type),
            *_outbox_headers(letter.headers, full),
            ("written at", shown_time(letter.created_at)),
            ("dead-lettered at", shown_time(letter.dead_lettered_at)),
            ("error", letter.error),
        ]
    return [
        ("id", str(letter.id)),
        ("consumer group", letter.group),
        ("topic", letter.topic),
        ("partition", str(letter.partition)),
        ("offset", str(letter.offset)),
        ("key", shown_bytes(letter.key, full)),
        ("value", shown_bytes(letter.value, full)),
        *_headers(letter.headers, full),
        ("kafka timestamp", "(none)" if letter.timestamp is None else shown_time(letter.timestamp)),
        ("dead-lettered at", shown_time(letter.created_at)),
        ("error", letter.error),
    ]


def _outbox_headers(stored: object, full: bool) -> list[tuple[str, str]]:
    try:
        headers: RecordHeaders = decode_headers(stored)
    except InvalidEventError as exc:
        return [("headers", f"{shown_bytes(repr(stored).encode(), full)} (unreadable: {exc})")]
    return _headers(headers, full)


def _headers(headers: RecordHeaders, full: bool) -> list[tuple[str, str]]:
    if not headers:
        return [("headers", "(none)")]
    return [(f"header {name!r}", shown_bytes(value, full)) for name, value in headers]


def shown_time(moment: datetime) -> str:
    """UTC, ISO 8601 with milliseconds."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")
