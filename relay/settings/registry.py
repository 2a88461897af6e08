"""The schema registry the write API's record formats serialize through (Confluent Schema
Registry API: Confluent, Karapace, Redpanda, Apicurio's ccompat API).

Read by :func:`relay.kafka.schema_formats.schema_registry` from the ``RELAY_SCHEMA_REGISTRY_*``
variables (a service sets them as it sets ``RELAY_DATABASE_URL``), or given to it in code.
The password, and a password written in the URL, are secrets: masked in every log line,
``repr`` and error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from relay.errors import ConfigurationError
from relay.runtime.secrets import Secret, mask_url
from relay.settings.spec import (
    Given,
    Invalid,
    Setting,
    describe,
    non_empty,
    seconds,
    text,
    whole_or_zero,
)


def registry_url(raw: str) -> Secret:
    """One or more ``http(s)://`` URLs separated by commas (the client tries each in turn);
    ``mock://`` is the client's in-process registry, for tests. Never shown in a refusal."""
    for url in raw.split(","):
        scheme = urlsplit(url.strip()).scheme
        if scheme not in ("http", "https", "mock"):
            raise Invalid("must be http(s)://host:port of a schema registry (commas between)")
    return Secret(raw.strip())


def _masked(url: Secret) -> str:
    return ",".join(mask_url(part.strip()) for part in url.reveal().split(","))


URL = Setting(
    "url",
    "RELAY_SCHEMA_REGISTRY_URL",
    "--schema-registry-url",
    registry_url,
    help="schema registry URL(s), comma-separated",
    metavar="URL",
    secret=True,
    show=_masked,
)
USER = Setting(
    "user",
    "RELAY_SCHEMA_REGISTRY_USER",
    "--schema-registry-user",
    non_empty,
    help="schema registry basic-auth user (or API key)",
    metavar="USER",
)
PASSWORD = Setting(
    "password",
    "RELAY_SCHEMA_REGISTRY_PASSWORD",
    None,  # a secret: the variable only, never on a command line
    Secret,
    help="schema registry basic-auth password (or API secret)",
    secret=True,
)
CA = Setting(
    "ca_location",
    "RELAY_SCHEMA_REGISTRY_CA",
    "--schema-registry-ca",
    text,
    help="CA bundle (file or directory) that signs the registry's TLS certificate",
    metavar="PATH",
)
CERT = Setting(
    "certificate_location",
    "RELAY_SCHEMA_REGISTRY_CERT",
    "--schema-registry-cert",
    text,
    help="client certificate (PEM) for TLS client authentication",
    metavar="PATH",
)
KEY = Setting(
    "key_location",
    "RELAY_SCHEMA_REGISTRY_KEY",
    "--schema-registry-key",
    text,
    help="the client certificate's private key (PEM)",
    metavar="PATH",
)
TIMEOUT = Setting(
    "timeout_s",
    "RELAY_SCHEMA_REGISTRY_TIMEOUT_S",
    "--schema-registry-timeout",
    seconds,
    10.0,
    help="seconds one registry request may take",
    metavar="SECONDS",
)
RETRIES = Setting(
    "retries",
    "RELAY_SCHEMA_REGISTRY_RETRIES",
    "--schema-registry-retries",
    whole_or_zero,
    3,
    help="times the client retries a failed registry request (with back-off) before an error",
    metavar="N",
)
REGISTRY = (URL, USER, PASSWORD, CA, CERT, KEY, TIMEOUT, RETRIES)


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    """How to reach the schema registry. ``repr`` masks the secrets."""

    url: Secret
    user: str | None = None
    password: Secret | None = None
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    timeout_s: float = 10.0
    retries: int = 3

    def __repr__(self) -> str:
        shown = describe(REGISTRY, self)
        return "RegistrySettings(" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"

    def secrets(self) -> tuple[str, ...]:
        """The values no message may show (for :func:`relay.runtime.secrets.mask_text`)."""
        return tuple(s.reveal() for s in (self.password,) if s is not None)


def load_registry_settings(
    flags: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None
) -> RegistrySettings:
    """The registry's settings from flags and ``RELAY_SCHEMA_REGISTRY_*``; a
    ConfigurationError naming the variable when the URL is missing or malformed."""
    given = Given(flags, environ)
    url = given.required(URL, "schema registry")
    values = given.values(REGISTRY[1:])
    if (values["password"] is None) != (values["user"] is None):
        raise ConfigurationError(
            f"give both {USER.env} and {PASSWORD.env} for basic auth, or neither"
        )
    return RegistrySettings(url=url, **values)
