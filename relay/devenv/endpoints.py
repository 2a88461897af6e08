"""How to reach the development servers, whether they run, and how both are shown: the
password-masked text ``up``/``status`` print and the ``<workdir>/env`` shell file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from relay.runtime.secrets import mask_url

from .kafka_files import SASL_LISTENER, SASL_MECHANISM
from .workdir import resolve_workdir

ENV_FILE_NAME = "env"


@dataclass(frozen=True, slots=True)
class SaslEndpoint:
    """A Kafka listener that wants SASL_PLAINTEXT with the PLAIN mechanism."""

    bootstrap_servers: str
    username: str
    password: str = field(repr=False)

    def properties(self) -> dict[str, str]:
        """librdkafka properties (without ``bootstrap.servers``) that log in here."""
        return {
            "security.protocol": SASL_LISTENER,
            "sasl.mechanism": SASL_MECHANISM,
            "sasl.username": self.username,
            "sasl.password": self.password,
        }

    def client_config(self) -> dict[str, str]:
        """:meth:`properties` plus ``bootstrap.servers``: a whole client configuration."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.properties()}


@dataclass(frozen=True, slots=True)
class Endpoints:
    """How to reach the development servers."""

    database_url: str
    """SQLAlchemy URL (``postgresql+psycopg://``) of the ``relay`` database."""
    bootstrap_servers: str
    """Kafka ``bootstrap.servers`` (PLAINTEXT, no authentication)."""
    admin_database_url: str
    """URL of a role that may CREATE/DROP DATABASE, connected to a maintenance database."""
    sasl_bootstrap_servers: str | None = None
    """The same broker's SASL_PLAINTEXT listener (PLAIN mechanism), if it has one."""
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    target_bootstrap_servers: str | None = None
    """``bootstrap.servers`` (PLAINTEXT) of the second, independent Kafka cluster, if any."""

    @property
    def sasl(self) -> SaslEndpoint | None:
        """The SASL listener and its login, or None when the broker has none."""
        if self.sasl_bootstrap_servers is None or self.sasl_username is None:
            return None
        return SaslEndpoint(
            self.sasl_bootstrap_servers, self.sasl_username, self.sasl_password or ""
        )


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    name: str
    pid: int | None
    address: str
    answering: bool
    port_in_use: bool = False  # not running from this workdir, yet something listens there


@dataclass(frozen=True, slots=True)
class DevEnvStatus:
    workdir: Path
    postgres: ServiceStatus
    kafka: ServiceStatus
    endpoints: Endpoints
    target_kafka: ServiceStatus
    """The broker of the second Kafka cluster."""

    @property
    def up(self) -> bool:
        """All servers (PostgreSQL and both Kafka clusters) are running and answering."""
        return self.postgres.answering and self.kafka.answering and self.target_kafka.answering

    def __str__(self) -> str:
        return describe_status(self)


def env_file(workdir: Path | None = None) -> Path:
    """Shell file with ``export RELAY_...=`` lines for the running servers."""
    return resolve_workdir(workdir) / ENV_FILE_NAME


def write_env_file(path: Path, endpoints: Endpoints) -> None:
    text = (
        "# Connection settings of the relay development servers (written by `relay.devenv up`).\n"
        f"export RELAY_DATABASE_URL='{endpoints.database_url}'\n"
        f"export RELAY_ADMIN_DATABASE_URL='{endpoints.admin_database_url}'\n"
        f"export RELAY_KAFKA_BOOTSTRAP_SERVERS='{endpoints.bootstrap_servers}'\n"
    )
    if endpoints.sasl is not None:
        text += (
            "# The broker's SASL_PLAINTEXT listener (PLAIN), e.g. for `relay run`:\n"
            '#   --kafka-bootstrap-servers "$RELAY_DEV_SASL_BOOTSTRAP_SERVERS"\n'
            "#   -X security.protocol=SASL_PLAINTEXT -X sasl.mechanism=PLAIN\n"
            '#   -X sasl.username="$RELAY_DEV_SASL_USERNAME" '
            '-X sasl.password="$RELAY_DEV_SASL_PASSWORD"\n'
            f"export RELAY_DEV_SASL_BOOTSTRAP_SERVERS='{endpoints.sasl.bootstrap_servers}'\n"
            f"export RELAY_DEV_SASL_USERNAME='{endpoints.sasl.username}'\n"
            f"export RELAY_DEV_SASL_PASSWORD='{endpoints.sasl.password}'\n"
        )
    if endpoints.target_bootstrap_servers is not None:
        text += (
            "# The second, independent Kafka cluster (PLAINTEXT), e.g. a replication target:\n"
            "export RELAY_DEV_TARGET_KAFKA_BOOTSTRAP_SERVERS="
            f"'{endpoints.target_bootstrap_servers}'\n"
            "# `relay replicate` from the first cluster to the second:\n"
            f"export RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS='{endpoints.bootstrap_servers}'\n"
            "export RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS="
            f"'{endpoints.target_bootstrap_servers}'\n"
        )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    tmp.replace(path)


# --- human-readable output (returned as strings; the CLI prints them) ------------------------


def _display_path(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def describe_endpoints(endpoints: Endpoints, workdir: Path | None = None) -> str:
    """Connection settings with masked passwords, plus how to load the real ones."""
    return "\n".join(
        [
            f"RELAY_DATABASE_URL={mask_url(endpoints.database_url)}",
            f"RELAY_ADMIN_DATABASE_URL={mask_url(endpoints.admin_database_url)}",
            f"RELAY_KAFKA_BOOTSTRAP_SERVERS={endpoints.bootstrap_servers}",
            *(
                [
                    f"RELAY_DEV_SASL_BOOTSTRAP_SERVERS={endpoints.sasl.bootstrap_servers}",
                    f"RELAY_DEV_SASL_USERNAME={endpoints.sasl.username}",
                    "RELAY_DEV_SASL_PASSWORD=***",
                ]
                if endpoints.sasl is not None
                else []
            ),
            *(
                [f"RELAY_DEV_TARGET_KAFKA_BOOTSTRAP_SERVERS={endpoints.target_bootstrap_servers}"]
                if endpoints.target_bootstrap_servers is not None
                else []
            ),
            f"# to export them (with the passwords): source {_display_path(env_file(workdir))}",
        ]
    )


def describe_status(st: DevEnvStatus) -> str:
    lines = [f"workdir: {st.workdir}" + ("" if st.workdir.is_dir() else " (none here)")]
    for svc in (st.postgres, st.kafka, st.target_kafka):
        if svc.pid is None and svc.port_in_use:
            state = "not started from this workdir, but something listens on the port"
        elif svc.pid is None:
            state = "stopped"
        else:
            state = f"running (pid {svc.pid}), {'answering' if svc.answering else 'NOT answering'}"
        lines.append(f"{svc.name + ':':14}{svc.address}  {state}")
    if st.up:
        lines.append(describe_endpoints(st.endpoints, st.workdir))
    elif any(svc.pid is None and svc.port_in_use for svc in (st.postgres, st.kafka)):
        lines.append(
            "servers of another workdir? `relay dev` looks in ./.relay-dev of the current "
            "directory: run it from the checkout that started them, or set RELAY_DEV_DIR"
        )
    return "\n".join(lines)


def describe(what: Endpoints | DevEnvStatus, workdir: Path | None = None) -> str:
    """Human-readable (password-masked) text for the result of ``up()`` or ``status()``."""
    if isinstance(what, DevEnvStatus):
        return describe_status(what)
    return describe_endpoints(what, workdir)
