"""``up``/``down``/``status`` of the whole development environment (PostgreSQL + Kafka)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from relay.errors import DevEnvError
from relay.runtime.secrets import mask_url

from . import kafka, postgres
from .kafka_files import SASL_LISTENER, SASL_MECHANISM, SASL_PASSWORD, SASL_USERNAME
from .workdir import (
    DEFAULT_TIMEOUT,
    Ports,
    configured_ports,
    resolve_workdir,
    workdir_lock,
)

log = logging.getLogger("relay.devenv")

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


@dataclass(frozen=True, slots=True)
class DevEnvStatus:
    workdir: Path
    postgres: ServiceStatus
    kafka: ServiceStatus
    endpoints: Endpoints

    @property
    def up(self) -> bool:
        """Both servers are running and answering."""
        return self.postgres.answering and self.kafka.answering

    def __str__(self) -> str:
        return describe_status(self)


def _endpoints(database_url: str, bootstrap: str, admin_url: str, sasl: str | None) -> Endpoints:
    """``sasl`` is the broker's SASL listener (None if it has none)."""
    return Endpoints(
        database_url=database_url,
        bootstrap_servers=bootstrap,
        admin_database_url=admin_url,
        sasl_bootstrap_servers=sasl,
        sasl_username=None if sasl is None else SASL_USERNAME,
        sasl_password=None if sasl is None else SASL_PASSWORD,
    )


def endpoints_for(pg_port: int, kafka_port: int, sasl_bootstrap: str | None = None) -> Endpoints:
    return _endpoints(
        postgres.database_url(pg_port),
        kafka.bootstrap_servers(kafka_port),
        postgres.database_url(pg_port, "postgres"),
        sasl_bootstrap,
    )


def env_file(workdir: Path | None = None) -> Path:
    """Shell file with ``export RELAY_...=`` lines for the running servers."""
    return resolve_workdir(workdir) / ENV_FILE_NAME


def _write_env_file(path: Path, endpoints: Endpoints) -> None:
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
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    tmp.replace(path)


def _warn_port_drift(what: str, running: int, wanted: int) -> None:
    if running != wanted:
        log.warning(
            "%s is already running on port %d (not %d as configured); reusing it; "
            "run `down` first to move it",
            what,
            running,
            wanted,
        )


def up(workdir: Path | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> Endpoints:
    """Make sure PostgreSQL and Kafka of ``workdir`` (default ``$RELAY_DEV_DIR`` or
    ``./.relay-dev``) are running and answering, starting whatever is not; idempotent.

    Raises DevEnvError (with the tail of the server log) if a server cannot be started
    within ``timeout`` seconds each."""
    wd = resolve_workdir(workdir)
    started = time.monotonic()
    with workdir_lock(wd):
        wanted = configured_ports()
        if postgres.postgres_pid(wd) is not None:
            _warn_port_drift("PostgreSQL", postgres.postgres_port(wd), wanted.postgres)
        if kafka.kafka_pid(wd) is not None:
            running = kafka.kafka_ports(wd)
            _warn_port_drift("Kafka", running.kafka, wanted.kafka)
        database_url = postgres.start_postgres(wd, port=wanted.postgres, timeout=timeout)
        bootstrap = kafka.start_kafka(wd, ports=wanted, timeout=timeout)
        pg_port = postgres.postgres_port(wd)
        endpoints = _endpoints(
            database_url,
            bootstrap,
            postgres.database_url(pg_port, "postgres"),
            kafka.sasl_bootstrap_servers(wd),
        )
        _write_env_file(env_file(wd), endpoints)
    log.info("development servers up in %.1fs", time.monotonic() - started)
    return endpoints


def down(workdir: Path | None = None, *, timeout: float = 30.0) -> None:
    """Stop the broker and the database of ``workdir``; idempotent."""
    wd = resolve_workdir(workdir)
    if not wd.is_dir():
        return
    with workdir_lock(wd):
        errors: list[str] = []
        try:
            kafka.stop_kafka(wd, timeout=timeout)
        except DevEnvError as exc:
            errors.append(str(exc))
        try:
            postgres.stop_postgres(wd, timeout=max(timeout, 60.0))
        except DevEnvError as exc:
            errors.append(str(exc))
        if errors:
            raise DevEnvError("\n".join(errors))


def status(workdir: Path | None = None) -> DevEnvStatus:
    """Whether the servers of ``workdir`` are running and answering (starts nothing)."""
    wd = resolve_workdir(workdir)
    pg_pid = postgres.postgres_pid(wd)
    pg_port = postgres.postgres_port(wd)
    k_pid = kafka.kafka_pid(wd)
    k_ports: Ports = kafka.kafka_ports(wd)
    return DevEnvStatus(
        workdir=wd,
        postgres=ServiceStatus(
            name="PostgreSQL",
            pid=pg_pid,
            address=f"127.0.0.1:{pg_port}",
            answering=pg_pid is not None and postgres.postgres_answering(pg_port),
        ),
        kafka=ServiceStatus(
            name="Kafka",
            pid=k_pid,
            address=kafka.bootstrap_servers(k_ports.kafka),
            answering=k_pid is not None and kafka.kafka_answering(k_ports.kafka),
        ),
        endpoints=endpoints_for(pg_port, k_ports.kafka, kafka.sasl_bootstrap_servers(wd)),
    )


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
            f"# to export them (with the passwords): source {_display_path(env_file(workdir))}",
        ]
    )


def describe_status(st: DevEnvStatus) -> str:
    lines = [f"workdir: {st.workdir}"]
    for svc in (st.postgres, st.kafka):
        if svc.pid is None:
            state = "stopped"
        else:
            state = f"running (pid {svc.pid}), {'answering' if svc.answering else 'NOT answering'}"
        lines.append(f"{svc.name + ':':12}{svc.address}  {state}")
    if st.up:
        lines.append(describe_endpoints(st.endpoints, st.workdir))
    return "\n".join(lines)


def describe(what: Endpoints | DevEnvStatus, workdir: Path | None = None) -> str:
    """Human-readable (password-masked) text for the result of ``up()`` or ``status()``."""
    if isinstance(what, DevEnvStatus):
        return describe_status(what)
    return describe_endpoints(what, workdir)
