"""Event values as JSON: the built-in conversions and the caller's encoder hook.

An object ``json`` cannot encode goes first to the caller's hook (``json_default=`` of the
call, else the process-wide one of :func:`set_json_default`), like ``json.dumps``'s
``default``: it returns something JSON can encode or raises TypeError. Then the built-in
conversions: ``datetime``, ``date`` and ``time`` as ISO 8601 text (``isoformat()``: an
aware datetime keeps its offset, a naive one has none), ``uuid.UUID`` as its text and
``Decimal`` as its text (``"12.50"``: exact, as JSON numbers read as floats are not).
NaN and the infinities, float or Decimal, are refused: JSON has no such numbers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from relay.errors import InvalidEventError

JsonDefault = Callable[[Any], Any]

_process_default: JsonDefault | None = None


def set_json_default(default: JsonDefault | None) -> JsonDefault | None:
    """Make ``default`` the encoder hook of every publish in this process that gives none
    of its own (None: the built-in conversions only). Returns the previous hook."""
    global _process_default
    before, _process_default = _process_default, default
    return before


def builtin_default(obj: Any) -> Any:
    """The built-in conversions (see the module)."""
    if isinstance(obj, datetime | date | time):
        return obj.isoformat()
    if isinstance(obj, uuid.UUID):
        return str(obj)
    if isinstance(obj, Decimal):
        if not obj.is_finite():
            raise ValueError("Decimal NaN and infinities are not JSON compliant")
        return str(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _chained(hook: JsonDefault) -> JsonDefault:
    def default(obj: Any) -> Any:
        try:
            return hook(obj)
        except TypeError:
            return builtin_default(obj)

    return default


def _encoder(default: JsonDefault) -> json.JSONEncoder:
    return json.JSONEncoder(
        separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=default
    )


_BUILTIN = _encoder(builtin_default)


def to_json(value: Any, json_default: JsonDefault | None = None) -> bytes:
    """``value`` as compact UTF-8 JSON; InvalidEventError when it cannot be."""
    hook = json_default if json_default is not None else _process_default
    encoder = _BUILTIN if hook is None else _encoder(_chained(hook))
    try:
        return encoder.encode(value).encode("utf-8")
    except ValueError as exc:
        if "not JSON compliant" in str(exc):
            raise InvalidEventError(
                "event value holds NaN or an infinity, which JSON cannot represent"
            ) from None
        raise InvalidEventError(f"event value cannot be encoded as JSON: {exc}") from exc
    except (TypeError, RecursionError) as exc:
        raise InvalidEventError(
            f"event value is neither bytes nor JSON-serialisable: {exc}"
        ) from exc
