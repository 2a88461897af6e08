"""What the database refused of a mirror batch: whether a record is at fault (for good,
or for now) or the database, the reason a dead letter gives, and a dead letter's row."""

from __future__ import annotations

import base64
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from relay.mirroring.types import DeadLetter
from relay.postgres.engine import driver_message
from relay.runtime.secrets import mask_text


def dead_letter_row(group: str, dead: DeadLetter) -> dict[str, object]:
    """``dead``'s row of mirror_dead_letters."""
    record = dead.record
    return {
        "consumer_group": group,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": record.key,
        "value": record.value,
        "headers": [_header_json(name, value) for name, value in record.headers],
        "error": dead.error.replace("\x00", "\\x00"),
        "kafka_timestamp": record.timestamp,
    }


# Errors about one record that trying the same record again can cure: a foreign key whose
# parent arrives later (from another topic or partition), a user's trigger that checks
# something another record will provide.
_MAY_HEAL = frozenset({"23503", "P0001"})
# Errors about one record that no retry cures: data and constraint errors, a type
# mismatch, a value past an index's row size limit (54000).
_FOR_GOOD_CLASSES = ("22", "23")
_FOR_GOOD = frozenset({"42804", "54000"})


def record_fault(exc: DBAPIError) -> Literal["for good", "may heal"] | None:
    """Whether the database refused the record itself (for good, or for now), or None
    when the error is the database's (connection, server), not the record's."""
    sqlstate = str(getattr(exc.orig, "sqlstate", None) or "")
    if sqlstate in _MAY_HEAL:
        return "may heal"
    if (
        isinstance(exc, sa.exc.IntegrityError | sa.exc.DataError)
        or sqlstate.startswith(_FOR_GOOD_CLASSES)
        or sqlstate in _FOR_GOOD
    ):
        return "for good"
    return None


def refusal_reason(exc: DBAPIError) -> str:
    message = driver_message(exc)
    return f"database rejected the record{message.code}: {mask_text(message.first_line)}"


def _header_json(name: str, value: bytes | None) -> dict[str, str | None]:
    if value is None:
        return {"name": name, "value": None}
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        return {"name": name, "base64": base64.b64encode(value).decode("ascii")}
    return {"name": name, "value": text}
