"""Kafka client properties: ``name=value`` pairs, properties files, and the properties a
component sets itself (which a user may not override)."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from pathlib import Path

from relay.errors import ConfigurationError


def parse_property_pairs(pairs: Iterable[str], source: str) -> dict[str, str]:
    """``name=value`` strings as a dict; a malformed pair is a ConfigurationError."""
    result: dict[str, str] = {}
    for raw in pairs:
        pair = raw.strip()
        if not pair or pair.startswith("#"):
            continue
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            # Never echo more than the leading property name: the rest may be a secret.
            leading = re.match(r"[\w.-]*", pair)
            shown = f"{leading[0] if leading else ''}..."
            raise ConfigurationError(
                f"{source}: expected a Kafka property as name=value, got {shown!r}"
            )
        result[name] = value.strip()
    return result


def read_properties_file(path: str) -> dict[str, str]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read Kafka properties file {path}: {exc.strerror}"
        ) from exc
    return parse_property_pairs(lines, source=path)


def check_owned_properties(names: Collection[str], owned: frozenset[str], owner: str) -> None:
    """A ConfigurationError when ``names`` sets a property that ``owner`` sets itself."""
    clash = sorted(set(names) & owned)
    if clash:
        raise ConfigurationError(
            f"Kafka property {clash[0]!r} is set by {owner} itself and cannot be overridden"
            + (" (use --kafka-bootstrap-servers)" if clash[0] == "bootstrap.servers" else "")
        )
