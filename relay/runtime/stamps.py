"""The metadata a position carries in Kafka (a committed offset's ``metadata``): whose it
is, as compact JSON of string fields. The forward relay stamps the outbox database and
prefix (``PositionOwner``), the replicator the source cluster and topic (``Origin``)."""

from __future__ import annotations

import json
from collections.abc import Sequence


def stamp(**fields: str) -> str:
    return json.dumps(fields, separators=(",", ":"))


def read_stamp(text: str | None, names: Sequence[str]) -> tuple[str, ...] | None:
    """The fields ``names`` of a stamp, in that order; None when ``text`` is empty, not
    a stamp, or lacks one of them (a position committed before stamps, or not ours)."""
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    values = [found.get(name) for name in names]
    strings = tuple(value for value in values if isinstance(value, str))
    return strings if len(strings) == len(names) else None


def read_fields(text: str | None) -> dict[str, str]:
    """Every string field of a stamp (empty when ``text`` is not a stamp)."""
    if not text:
        return {}
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): v for k, v in found.items() if isinstance(v, str)}
