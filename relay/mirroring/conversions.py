"""A JSON value (or key text) checked and converted for a column's kind. Pure functions.

``from_json`` takes what a record's value holds, ``from_text`` what its key or a key
pattern's part holds; a value that does not fit the column is a DecodeError (the record is
dead-lettered), never a guess.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation

from relay.errors import DecodeError
from relay.mirroring.types import ColumnKind

INTEGER_TEXT = re.compile(r"^-?[0-9]+$")
_MISSING = object()


def from_json(kind: ColumnKind, value: object, what: str) -> object:
    """A JSON value converted for a column of ``kind``; DecodeError on a type mismatch."""
    if value is None or kind is ColumnKind.JSON:
        return value
    if kind is ColumnKind.OTHER:
        if _plain(value):  # arrays, enums, ...: the database checks the value
            return value
        raise DecodeError(f"{what} is {json_type(value)}, column needs a scalar or an array")
    converted = _JSON_CONVERTERS.get(kind, _from_json_string)(kind, value, what)
    if converted is _MISSING:
        raise DecodeError(f"{what} is {json_type(value)}, column needs {kind.value}")
    return converted


def _json_text(_kind: ColumnKind, value: object, _what: str) -> object:
    return value if isinstance(value, str) else _MISSING


def _json_integer(_kind: ColumnKind, value: object, _what: str) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return _MISSING


def _json_number(kind: ColumnKind, value: object, what: str) -> object:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if kind is ColumnKind.FLOAT else Decimal(repr(value))
    if isinstance(value, str) and kind is ColumnKind.NUMERIC:
        return from_text(kind, value, what)
    return _MISSING


def _json_boolean(_kind: ColumnKind, value: object, _what: str) -> object:
    return value if isinstance(value, bool) else _MISSING


def _from_json_string(kind: ColumnKind, value: object, what: str) -> object:
    return _from_string(kind, value, what) if isinstance(value, str) else _MISSING


_JSON_CONVERTERS = {
    ColumnKind.TEXT: _json_text,
    ColumnKind.INTEGER: _json_integer,
    ColumnKind.NUMERIC: _json_number,
    ColumnKind.FLOAT: _json_number,
    ColumnKind.BOOLEAN: _json_boolean,
}


def from_text(kind: ColumnKind, text: str, what: str) -> object:
    """Key text converted for a column of ``kind``."""
    if kind is ColumnKind.INTEGER:
        if INTEGER_TEXT.match(text):
            return int(text)
        raise DecodeError(f"{what} {short(text)!r} is not an integer")
    if kind in (ColumnKind.NUMERIC, ColumnKind.FLOAT):
        try:
            number = Decimal(text)
        except InvalidOperation:
            raise DecodeError(f"{what} {short(text)!r} is not a number") from None
        return float(number) if kind is ColumnKind.FLOAT else number
    if kind is ColumnKind.BOOLEAN:
        if text in ("true", "false"):
            return text == "true"
        raise DecodeError(f"{what} {short(text)!r} is not true or false")
    if kind in (ColumnKind.TEXT, ColumnKind.OTHER, ColumnKind.JSON):
        return text
    return _from_string(kind, text, what)


def _from_string(kind: ColumnKind, text: str, what: str) -> object:
    try:
        if kind is ColumnKind.TIMESTAMPTZ:
            moment = datetime.fromisoformat(text)
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        if kind is ColumnKind.TIMESTAMP:
            moment = datetime.fromisoformat(text)
            return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment
        if kind is ColumnKind.DATE:
            return date.fromisoformat(text)
        if kind is ColumnKind.UUID:
            return uuid.UUID(text)
        if kind is ColumnKind.BYTES:
            return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise DecodeError(f"{what} {short(text)!r} is not a valid {kind.value}") from None
    return text


def _plain(value: object) -> bool:
    """Scalars and (nested) lists of them: what the driver can send for any type."""
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
