"""Private servers: a PostgreSQL server and Kafka broker of their own (and the broker of a
second Kafka cluster when asked), for a chaos run, a benchmark or a test that kills,
restarts or reconfigures them.

They are never the shared development servers: they live in a working directory of their
own, on free loopback ports, and their owner stops them. The second cluster is started as
:mod:`relay.devenv` starts the development environment's (``<workdir>/kafka-target``,
sharing the first broker's jars). The broker jars are hard-linked from an existing
development working directory when one has them (Maven resolves them otherwise).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from relay.devenv.kafka import start_kafka, stop_kafka
from relay.devenv.kafka_files import libs_dir, libs_resolved
from relay.devenv.ports import free_ports
from relay.devenv.postgres import start_postgres, stop_postgres
from relay.devenv.target import start_target_kafka, stop_target_kafka
from relay.devenv.workdir import (
    DEFAULT_DIRNAME,
    Ports,
    env_workdir,
)
from relay.errors import DevEnvError
from relay.postgres.migrations import PROJECT_ROOT

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PrivateServers:
    workdir: Path
    ports: Ports
    database_url: str
    bootstrap_servers: str
    target_bootstrap_servers: str | None = None  # the second cluster's, when started


def _share_kafka_libs(workdir: Path) -> None:
    if libs_resolved(workdir):
        return
    for candidate in (env_workdir(), PROJECT_ROOT / DEFAULT_DIRNAME):
        if candidate is None or not libs_resolved(candidate):
            continue
        source = libs_dir(candidate)
        staging = workdir / "kafka-libs.link"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            shutil.copytree(source, staging, copy_function=os.link)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(source, staging)
        staging.rename(libs_dir(workdir))
        return


def start_servers(workdir: Path, timeout: float = 120.0, *, target: bool = False) -> PrivateServers:
    """Start PostgreSQL and Kafka in ``workdir`` on free ports, and with ``target`` the
    broker of a second Kafka cluster too; returns how to reach them."""
    workdir.mkdir(parents=True, exist_ok=True)
    _share_kafka_libs(workdir)
    names = [f.name for f in fields(Ports)]  # every listener gets a free port of its own
    ports = Ports(**dict(zip(names, free_ports(len(names)), strict=True)))
    url = start_postgres(workdir, port=ports.postgres, timeout=timeout)
    bootstrap = start_kafka(workdir, ports=ports, timeout=timeout)
    second = start_target_kafka(workdir, ports=ports, timeout=timeout) if target else None
    return PrivateServers(workdir, ports, url, bootstrap, second)


def start_broker(
    workdir: Path, overrides: Mapping[str, str] | None = None, timeout: float = 120.0
) -> str:
    """Start a Kafka broker of its own in ``workdir`` on free ports, with ``overrides`` in
    its server.properties (e.g. a short offsets.retention.minutes); its bootstrap servers."""
    workdir.mkdir(parents=True, exist_ok=True)
    _share_kafka_libs(workdir)
    names = [f.name for f in fields(Ports)]
    ports = Ports(**dict(zip(names, free_ports(len(names)), strict=True)))
    return start_kafka(workdir, ports=ports, timeout=timeout, overrides=overrides)


def stop_servers(workdir: Path) -> None:
    """Stop every server; never raises (the run's verdict is already known)."""
    for stop in (stop_target_kafka, stop_kafka, stop_postgres):
        try:
            stop(workdir, True)
        except DevEnvError as exc:
            log.warning("stopping a private server failed: %s", exc)


def remove_workdir(path: Path) -> None:
    """Delete ``path`` (e.g. ``<workdir>/pg``), and the directory it may link to."""
    if path.is_symlink():
        shutil.rmtree(path.resolve(), ignore_errors=True)
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)
