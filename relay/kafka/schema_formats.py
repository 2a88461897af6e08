"""Schema Registry formats for the write API: Avro, Protobuf and JSON Schema, through
confluent-kafka's own client and serializers (the optional extra ``outbox-relay[registry]``).

>>> registry = schema_registry()            # RELAY_SCHEMA_REGISTRY_URL, _USER, _PASSWORD ...
>>> orders = avro_format(ORDER_SCHEMA, registry)
>>> relay.publish(session, "orders", key="o-42", value={"id": 42, "total": 99},
...               value_format=orders)

Each format serializes in the service's process, inside its transaction: the outbox holds
the Confluent wire format (magic byte 0, the 4-byte schema id, the payload), exactly the
bytes Kafka gets, and the relay publishes them without knowing the format. A registry
that cannot be reached fails the write with :class:`SchemaRegistryUnavailableError`, a
value the schema refuses (or a schema not registered under its subject) with
:class:`SerializationError`: nothing is written, and the relay never meets either.

Production defaults: ``auto_register=False`` (schemas are registered by your deployment
pipeline, the serializer only looks its schema up), subject name strategy ``"topic"``
(``<topic>-value`` / ``<topic>-key``); ``"record"`` and ``"topic_record"`` are the other
two; ``use_latest_version=True`` serializes with the subject's latest schema instead.
The client is meant for registries with the Confluent Schema Registry API: Confluent's,
Karapace, Redpanda's, Apicurio's ``/apis/ccompat/v7``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.error import SchemaRegistryError as ClientRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext
from confluent_kafka.serialization import SerializationError as ClientSerializationError

from relay.errors import (
    ConfigurationError,
    SchemaRegistryError,
    SchemaRegistryUnavailableError,
    SerializationError,
)
from relay.runtime.secrets import mask_text, mask_url
from relay.settings.registry import RegistrySettings, load_registry_settings

SubjectStrategy = Literal["topic", "record", "topic_record"]
STRATEGIES: dict[str, Callable[..., str | None]] = {
    "topic": topic_subject_name_strategy,
    "record": record_subject_name_strategy,
    "topic_record": topic_record_subject_name_strategy,
}
# Schema Registry error codes: subject / version / schema not found.
_NOT_FOUND = {40401, 40402, 40403}
# The HTTP stacks the client may use: their errors are the registry being out of reach.
_TRANSPORT_MODULES = frozenset({"httpx", "httpx2", "httpcore", "requests", "urllib3", "ssl"})


def registry_answer(exc: ClientRegistryError) -> Literal["unavailable", "not_found", "refused"]:
    """What an error answer of the registry means: failing (5xx, timeout, throttled: try
    again), a subject, version or schema id it does not have, or a refusal."""
    if exc.http_status_code >= 500 or exc.http_status_code in (408, 429):
        return "unavailable"
    if exc.http_status_code == 404 or exc.error_code in _NOT_FOUND:
        return "not_found"
    return "refused"


def is_transport_error(exc: BaseException) -> bool:
    """A connection refused, timed out or broken (not an answer of the registry)."""
    if isinstance(exc, OSError | TimeoutError):
        return True
    return any(cls.__module__.split(".")[0] in _TRANSPORT_MODULES for cls in type(exc).__mro__)


class SchemaRegistry:
    """A schema registry client and what its messages may not show. ``repr`` shows the
    URL with its password masked; the client (and the password) stay inside."""

    __slots__ = ("_secrets", "client", "shown_url")

    def __init__(
        self, client: SchemaRegistryClient, shown_url: str, secrets: tuple[str, ...] = ()
    ) -> None:
        self.client = client
        self.shown_url = shown_url
        self._secrets = secrets

    def __repr__(self) -> str:
        return f"SchemaRegistry({self.shown_url})"

    def mask(self, text: str) -> str:
        return mask_text(text, self._secrets)


def schema_registry(
    settings: RegistrySettings | None = None, *, environ: Mapping[str, str] | None = None
) -> SchemaRegistry:
    """A client of the registry ``settings`` describe (default: read from the
    ``RELAY_SCHEMA_REGISTRY_*`` variables, :mod:`relay.settings.registry`)."""
    if settings is None:
        settings = load_registry_settings(environ=environ)
    url = settings.url.reveal()
    conf: dict[str, Any] = {
        "url": url,
        "timeout": settings.timeout_s,
        "max.retries": settings.retries,
    }
    if settings.user is not None and settings.password is not None:
        conf["basic.auth.user.info"] = f"{settings.user}:{settings.password.reveal()}"
    for name, value in (
        ("ssl.ca.location", settings.ca_location),
        ("ssl.certificate.location", settings.certificate_location),
        ("ssl.key.location", settings.key_location),
    ):
        if value:
            conf[name] = value
    secrets = settings.secrets()
    shown = ",".join(mask_url(part.strip()) for part in url.split(","))
    try:
        client = SchemaRegistryClient.new_client(conf)  # mock://: the client's own stand-in
    except (ValueError, TypeError, OSError) as exc:
        raise SchemaRegistryError(
            f"schema registry {shown}: {mask_text(str(exc), secrets)}"
        ) from None
    return SchemaRegistry(client, shown, secrets)


def _registry(registry: SchemaRegistry | SchemaRegistryClient | None) -> SchemaRegistry:
    if registry is None:
        return schema_registry()
    if isinstance(registry, SchemaRegistry):
        return registry
    return SchemaRegistry(registry, "(client given)")  # e.g. SchemaRegistryClient mock://


class SchemaFormat:
    """A :class:`relay.publishing.formats.RecordFormat` over one confluent-kafka
    serializer; the errors of a call become the package's (see the module)."""

    __slots__ = ("_key", "_value", "kind", "registry")

    def __init__(
        self,
        kind: str,
        registry: SchemaRegistry,
        make: Callable[[dict[str, Any]], Callable[[Any, SerializationContext], bytes | None]],
        conf: dict[str, Any],
    ) -> None:
        self.kind = kind
        self.registry = registry
        # confluent's serializers know the record's field only from the context, but cache
        # what they looked up per serializer: one for keys, one for values.
        try:
            self._key = make(dict(conf))
            self._value = make(dict(conf))
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"{kind} format: {exc}") from None

    def __repr__(self) -> str:
        return f"SchemaFormat({self.kind}, {self.registry!r})"

    def serialize(self, topic: str, obj: Any, *, is_key: bool) -> bytes:
        field = MessageField.KEY if is_key else MessageField.VALUE
        serializer = self._key if is_key else self._value
        what = "key" if is_key else "value"
        try:
            data = serializer(obj, SerializationContext(topic, field))
        except ClientRegistryError as exc:
            raise self._refused(exc, topic, what) from None
        except Exception as exc:
            if is_transport_error(exc) and not isinstance(exc, ClientSerializationError):
                raise SchemaRegistryUnavailableError(
                    f"schema registry {self.registry.shown_url} unreachable: "
                    f"{self.registry.mask(f'{type(exc).__name__}: {exc}')}; nothing was written"
                ) from None
            raise SerializationError(
                f"event {what} for topic {topic!r} does not fit its {self.kind} schema:"
                f" {self.registry.mask(str(exc) or type(exc).__name__)}"
            ) from None
        if data is None:
            raise SerializationError(f"event {what} for topic {topic!r}: the serializer gave null")
        return data

    def _refused(self, exc: ClientRegistryError, topic: str, what: str) -> Exception:
        shown = self.registry.shown_url
        reason = self.registry.mask(str(exc))
        answer = registry_answer(exc)
        if answer == "unavailable":
            return SchemaRegistryUnavailableError(
                f"schema registry {shown} failed: {reason}; nothing was written"
            )
        if answer == "not_found":
            return SerializationError(
                f"event {what} for topic {topic!r}: its {self.kind} schema is not registered"
                f" under its subject in {shown} ({reason}); auto-registration is off:"
                " register the schema first"
            )
        return SchemaRegistryError(f"schema registry {shown} refused: {reason}")


def _conf(
    subject_strategy: SubjectStrategy, auto_register: bool, use_latest_version: bool
) -> dict[str, Any]:
    strategy = STRATEGIES.get(subject_strategy)
    if strategy is None:
        raise SchemaRegistryError(
            f"unknown subject name strategy {subject_strategy!r}: use one of"
            f" {', '.join(STRATEGIES)}"
        )
    if auto_register and use_latest_version:
        raise ConfigurationError("auto_register and use_latest_version exclude each other")
    return {
        "auto.register.schemas": auto_register,
        "use.latest.version": use_latest_version,
        "subject.name.strategy": strategy,
    }


def avro_format(
    schema: str,
    registry: SchemaRegistry | SchemaRegistryClient | None = None,
    *,
    subject_strategy: SubjectStrategy = "topic",
    auto_register: bool = False,
    use_latest_version: bool = False,
    to_dict: Callable[[Any, SerializationContext], dict[str, Any]] | None = None,
) -> SchemaFormat:
    """Avro with ``schema`` (its JSON text); values are dicts (or objects ``to_dict``
    turns into one)."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    reg = _registry(registry)
    conf = _conf(subject_strategy, auto_register, use_latest_version)
    return SchemaFormat("Avro", reg, lambda c: AvroSerializer(reg.client, schema, to_dict, c), conf)


def json_schema_format(
    schema: str,
    registry: SchemaRegistry | SchemaRegistryClient | None = None,
    *,
    subject_strategy: SubjectStrategy = "topic",
    auto_register: bool = False,
    use_latest_version: bool = False,
    to_dict: Callable[[Any, SerializationContext], dict[str, Any]] | None = None,
) -> SchemaFormat:
    """JSON Schema with ``schema`` (its JSON text); values are validated against it."""
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    reg = _registry(registry)
    conf = _conf(subject_strategy, auto_register, use_latest_version)
    return SchemaFormat(
        "JSON Schema", reg, lambda c: JSONSerializer(schema, reg.client, to_dict, c), conf
    )


def protobuf_format(
    message_type: type[Any],
    registry: SchemaRegistry | SchemaRegistryClient | None = None,
    *,
    subject_strategy: SubjectStrategy = "topic",
    auto_register: bool = False,
    use_latest_version: bool = False,
) -> SchemaFormat:
    """Protobuf of the generated ``message_type``; values are its instances."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    reg = _registry(registry)
    conf = _conf(subject_strategy, auto_register, use_latest_version)
    return SchemaFormat(
        "Protobuf", reg, lambda c: ProtobufSerializer(message_type, reg.client, c), conf
    )
