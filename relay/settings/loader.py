"""The one settings loader: a value comes from a CLI flag, else from ``RELAY_*``.

Both directions (and the tools) read their settings through :class:`SettingsSource`, so a
setting's name, its environment variable and its error messages follow one rule: the
flag ``--batch-size`` and ``RELAY_BATCH_SIZE`` are the setting ``batch_size``, and a
malformed value is one :class:`~relay.errors.ConfigurationError` naming the variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from relay.errors import ConfigurationError

ENV_PREFIX = "RELAY_"


class SettingsSource:
    """CLI ``overrides`` (None values ignored) on top of the environment.

    ``prefix`` names the settings' family: ``RELAY_`` for the relay's own,
    ``RELAY_MIRROR_`` for the mirror's.
    """

    __slots__ = ("_env", "_given", "prefix")

    def __init__(
        self,
        overrides: Mapping[str, object] | None = None,
        environ: Mapping[str, str] | None = None,
        prefix: str = ENV_PREFIX,
    ) -> None:
        self._env = os.environ if environ is None else environ
        self._given = {k: v for k, v in (overrides or {}).items() if v is not None}
        self.prefix = prefix

    def env_name(self, name: str) -> str:
        return self.prefix + name.upper()

    def raw(self, name: str) -> object | None:
        """The flag's value when given, else the environment variable's (None: neither)."""
        if name in self._given:
            return self._given[name]
        return self._env.get(self.env_name(name))

    def text(self, name: str) -> str | None:
        value = self.raw(name)
        return None if value is None else str(value)

    def environ(self, variable: str, default: str = "") -> str:
        """An environment variable that has no flag (e.g. ``RELAY_KAFKA_PROPERTIES``)."""
        return self._env.get(variable, default)

    def non_empty(self, name: str) -> str | None:
        value = self.text(name)
        if value is not None and not value.strip():
            raise ConfigurationError(f"{self.env_name(name)} must not be empty")
        return value

    def positive_int(self, name: str) -> int | None:
        value = self.raw(name)
        return None if value is None else positive_int(self.env_name(name), str(value))

    def positive_float(self, name: str) -> float | None:
        value = self.raw(name)
        return None if value is None else positive_float(self.env_name(name), str(value))

    def boolean(self, name: str) -> bool | None:
        value = self.raw(name)
        return None if value is None else boolean(self.env_name(name), value)


def positive_int(name: str, raw: str | int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return value


def positive_float(name: str, raw: str | float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {value}")
    return value


def boolean(name: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    lowered = str(raw).strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigurationError(f"{name} must be true or false, got {raw!r}")


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
