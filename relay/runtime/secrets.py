"""Keeping secrets out of logs, error messages and ``repr``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

_SENSITIVE_KEY = re.compile(r"password|secret|sasl\.oauthbearer\.config|ssl\.key\.pem|token", re.I)
_URL_PASSWORD = re.compile(
    r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?P<tail>@)", re.I
)


class Secret:
    """A string that never shows itself in ``str``, ``repr`` or f-strings."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        # Spark ships settings to its tasks by pickling them.
        return (Secret, (self._value,))


def mask_url(url: str) -> str:
    """The URL with its password replaced by ``***``, safe to print."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return mask_text(url)
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{hostinfo}"))


def mask_text(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with URL passwords and the given secret values replaced by ``***``."""
    masked = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}{m['tail']}", text)
    for secret in secrets:
        if secret:
            masked = masked.replace(secret, MASK)
    return masked


def is_sensitive_property(name: str) -> bool:
    return bool(_SENSITIVE_KEY.search(name))


def mask_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Client properties with every sensitive value replaced by ``***``."""
    return {k: (MASK if is_sensitive_property(k) else v) for k, v in properties.items()}
