"""``up``/``down``/``status`` of the whole development environment: PostgreSQL, the Kafka
broker, and the broker of a second, independent Kafka cluster (:mod:`.target`)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from relay.errors import DevEnvError

from . import kafka, postgres, target
from .endpoints import DevEnvStatus, Endpoints, ServiceStatus, env_file, write_env_file
from .kafka_files import SASL_PASSWORD, SASL_USERNAME
from .ports import port_is_free
from .workdir import DEFAULT_TIMEOUT, LOOPBACK, configured_ports, resolve_workdir, workdir_lock

log = logging.getLogger("relay.devenv")


def _endpoints(
    database_url: str, bootstrap: str, admin_url: str, sasl: str | None, target_bootstrap: str
) -> Endpoints:
    """``sasl`` is the broker's SASL listener (None if it has none)."""
    return Endpoints(
        database_url=database_url,
        bootstrap_servers=bootstrap,
        admin_database_url=admin_url,
        sasl_bootstrap_servers=sasl,
        sasl_username=None if sasl is None else SASL_USERNAME,
        sasl_password=None if sasl is None else SASL_PASSWORD,
        target_bootstrap_servers=target_bootstrap,
    )


def endpoints_for(
    pg_port: int, kafka_port: int, sasl_bootstrap: str | None, target_kafka_port: int
) -> Endpoints:
    return _endpoints(
        postgres.database_url(pg_port),
        kafka.bootstrap_servers(kafka_port),
        postgres.database_url(pg_port, "postgres"),
        sasl_bootstrap,
        kafka.bootstrap_servers(target_kafka_port),
    )


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
    """Make sure PostgreSQL and both Kafka clusters of ``workdir`` (default
    ``$RELAY_DEV_DIR`` or ``./.relay-dev``) are running and answering, starting whatever is
    not; idempotent.

    Raises DevEnvError (with the tail of the server log) if a server cannot be started
    within ``timeout`` seconds each."""
    wd = resolve_workdir(workdir)
    started = time.monotonic()
    with workdir_lock(wd):
        wanted = configured_ports()
        if postgres.postgres_pid(wd) is not None:
            _warn_port_drift("PostgreSQL", postgres.postgres_port(wd), wanted.postgres)
        if kafka.kafka_pid(wd) is not None:
            _warn_port_drift("Kafka", kafka.kafka_ports(wd).kafka, wanted.kafka)
        if target.target_kafka_pid(wd) is not None:
            running = target.target_kafka_ports(wd).kafka
            _warn_port_drift("The second Kafka cluster", running, wanted.target_kafka)
        database_url = postgres.start_postgres(wd, port=wanted.postgres, timeout=timeout)
        bootstrap = kafka.start_kafka(wd, ports=wanted, timeout=timeout)
        target_bootstrap = target.start_target_kafka(wd, ports=wanted, timeout=timeout)
        pg_port = postgres.postgres_port(wd)
        endpoints = _endpoints(
            database_url,
            bootstrap,
            postgres.database_url(pg_port, "postgres"),
            kafka.sasl_bootstrap_servers(wd),
            target_bootstrap,
        )
        write_env_file(env_file(wd), endpoints)
    log.info("development servers up in %.1fs", time.monotonic() - started)
    return endpoints


def down(workdir: Path | None = None, *, timeout: float = 30.0) -> None:
    """Stop both brokers and the database of ``workdir``; idempotent."""
    wd = resolve_workdir(workdir)
    if not wd.is_dir():
        return
    with workdir_lock(wd):
        errors: list[str] = []
        for stop_broker in (target.stop_target_kafka, kafka.stop_kafka):
            try:
                stop_broker(wd, timeout=timeout)
            except DevEnvError as exc:
                errors.append(str(exc))
        try:
            postgres.stop_postgres(wd, timeout=max(timeout, 60.0))
        except DevEnvError as exc:
            errors.append(str(exc))
        if errors:
            raise DevEnvError("\n".join(errors))


def _broker_status(name: str, pid: int | None, port: int) -> ServiceStatus:
    return ServiceStatus(
        name=name,
        pid=pid,
        address=kafka.bootstrap_servers(port),
        answering=pid is not None and kafka.kafka_answering(port),
        port_in_use=pid is None and not port_is_free(port),
    )


def status(workdir: Path | None = None) -> DevEnvStatus:
    """Whether the servers of ``workdir`` are running and answering (starts nothing)."""
    wd = resolve_workdir(workdir)
    pg_pid = postgres.postgres_pid(wd)
    pg_port = postgres.postgres_port(wd)
    k_port = kafka.kafka_ports(wd).kafka
    target_port = target.target_kafka_ports(wd).kafka
    return DevEnvStatus(
        workdir=wd,
        postgres=ServiceStatus(
            name="PostgreSQL",
            pid=pg_pid,
            address=f"{LOOPBACK}:{pg_port}",
            answering=pg_pid is not None and postgres.postgres_answering(pg_port),
            port_in_use=pg_pid is None and not port_is_free(pg_port),
        ),
        kafka=_broker_status("Kafka", kafka.kafka_pid(wd), k_port),
        target_kafka=_broker_status("Kafka target", target.target_kafka_pid(wd), target_port),
        endpoints=endpoints_for(pg_port, k_port, kafka.sasl_bootstrap_servers(wd), target_port),
    )
