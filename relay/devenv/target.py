"""The second, independent single-node KRaft Kafka cluster of the development environment
(e.g. the target cluster of a Kafka->Kafka replicator).

It is the broker of :mod:`.kafka`, with the same settings (transactions included), run for
the sub-working directory ``<workdir>/kafka-target``: its own storage and KRaft cluster id
(``kafka-target/kafka``), ``state.json`` and lock, a client and a controller listener only
(``Ports.target_kafka``/``target_kafka_controller``, no SASL listener), and the jars of
``<workdir>/kafka-libs`` (``kafka-target/kafka-libs`` is a symlink to them).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from relay.errors import DevEnvError

from . import kafka
from .kafka_files import ensure_libs, libs_dir
from .processes import port_open
from .workdir import (
    DEFAULT_TIMEOUT,
    ENV_TARGET_CONTROLLER_PORT,
    ENV_TARGET_KAFKA_PORT,
    LOOPBACK,
    Ports,
    configured_ports,
    resolve_workdir,
    workdir_lock,
)

TARGET_DIRNAME = "kafka-target"


def target_workdir(workdir: Path | None = None) -> Path:
    """The sub-working directory of the second cluster's broker."""
    return resolve_workdir(workdir) / TARGET_DIRNAME


def target_kafka_pid(workdir: Path | None = None) -> int | None:
    """Pid of the running broker of the second cluster of ``workdir``, or None."""
    return kafka.kafka_pid(target_workdir(workdir))


def target_kafka_ports(workdir: Path | None = None) -> Ports:
    """Ports the second cluster's broker was last started with (else the configured ones),
    shaped like :meth:`Ports.target_broker`: its listeners are ``kafka``/``kafka_controller``."""
    return kafka.kafka_ports(target_workdir(workdir), configured_ports().target_broker())


def _share_libs(wd: Path, sub: Path) -> None:
    """Make ``<sub>/kafka-libs`` a symlink to ``<wd>/kafka-libs``, resolving those first, so
    that both brokers run the same jars and Maven runs at most once."""
    ensure_libs(wd)
    link = libs_dir(sub)
    target = Path("..") / libs_dir(wd).name
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    if link.exists() and not link.is_symlink():
        return  # jars of its own (resolved by ensure_libs for that directory)
    link.unlink(missing_ok=True)
    link.symlink_to(target, target_is_directory=True)


def _check_ports_free(sub: Path, broker: Ports) -> None:
    for port, env in (
        (broker.kafka, ENV_TARGET_KAFKA_PORT),
        (broker.kafka_controller, ENV_TARGET_CONTROLLER_PORT),
    ):
        if port_open(port):
            raise DevEnvError(
                f"{LOOPBACK}:{port} is already in use by another process (not the second "
                f"Kafka cluster's broker of {sub}); stop it or choose another port with {env}"
            )


def start_target_kafka(
    workdir: Path | None = None, *, ports: Ports | None = None, timeout: float = DEFAULT_TIMEOUT
) -> str:
    """Start the second cluster's broker of ``workdir`` unless it is running (formatting its
    storage with a cluster id of its own on first use) on ``ports.target_kafka`` and
    ``ports.target_kafka_controller`` (default: :func:`configured_ports`), wait until it
    serves metadata, transactions and consumer groups, and return its bootstrap servers.
    A running broker keeps its ports."""
    wd = resolve_workdir(workdir)
    sub = target_workdir(wd)
    with workdir_lock(wd):
        sub.mkdir(parents=True, exist_ok=True)
        _share_libs(wd, sub)
        broker = (ports or configured_ports()).target_broker()
        if kafka.kafka_pid(sub) is None:
            _check_ports_free(sub, broker)
        return kafka.start_kafka(sub, ports=broker, timeout=timeout)


def stop_target_kafka(
    workdir: Path | None = None, hard: bool = False, *, timeout: float = 30.0
) -> None:
    """Stop the second cluster's broker like :func:`~relay.devenv.kafka.stop_kafka`."""
    sub = target_workdir(workdir)
    if sub.is_dir():
        kafka.stop_kafka(sub, hard, timeout=timeout)


def restart_target_kafka(
    workdir: Path | None = None, hard: bool = True, *, timeout: float = DEFAULT_TIMEOUT
) -> str:
    """Stop the second cluster's broker (SIGKILL when ``hard``) and start it again on the
    same ports; its bootstrap servers."""
    wd = resolve_workdir(workdir)
    with workdir_lock(wd):
        running = target_kafka_ports(wd)
        stop_target_kafka(wd, hard)
        ports = replace(
            configured_ports(),
            target_kafka=running.kafka,
            target_kafka_controller=running.kafka_controller,
        )
        return start_target_kafka(wd, ports=ports, timeout=timeout)
