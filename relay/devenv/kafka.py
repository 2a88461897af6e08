"""A single-node KRaft Kafka broker in ``<workdir>/kafka`` for development and tests.

The broker jars are resolved from Maven Central by ``infra/pom.xml`` into
``<workdir>/kafka-libs`` (once) and the broker runs as ``java -cp 'kafka-libs/*' kafka.Kafka``.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from relay.errors import DevEnvError
from relay.runtime.clock import Deadline

from .kafka_files import (
    JVM_OPTS,
    SASL_LISTENER,
    SASL_MECHANISM,
    SASL_PASSWORD,
    SASL_USERNAME,
    console_log,
    ensure_libs,
    format_storage,
    infra_file,
    java,
    kafka_dir,
    logs,
    pidfile,
    properties_current,
    properties_path,
    sasl_port,
    server_log,
    write_properties,
)
from .processes import (
    failure,
    pid_alive,
    port_open,
    process_cmdline,
    read_pid,
    spawn_detached,
    terminate,
    wait_for,
)
from .workdir import (
    DEFAULT_TIMEOUT,
    ENV_CONTROLLER_PORT,
    ENV_KAFKA_PORT,
    ENV_KAFKA_SASL_PORT,
    LOOPBACK,
    Ports,
    configured_ports,
    read_state,
    resolve_workdir,
    workdir_lock,
    write_state,
)

log = logging.getLogger("relay.devenv.kafka")

_WARMUP_TXN_ID = "relay-devenv-warmup"
_WARMUP_GROUP = "relay-devenv-warmup"
_NO_SASL = 0  # the kafka_sasl_port recorded in state.json for a broker without SASL listener


def bootstrap_servers(port: int) -> str:
    """Kafka ``bootstrap.servers`` of the broker listening on ``port``."""
    return f"{LOOPBACK}:{port}"


# --- state queries -------------------------------------------------------------------------


def kafka_pid(workdir: Path | None = None) -> int | None:
    """Pid of the running broker of ``workdir``, or None."""
    wd = resolve_workdir(workdir)
    pid = read_pid(pidfile(wd))
    if pid is None or not pid_alive(pid):
        return None
    cmdline = process_cmdline(pid)
    if cmdline is not None and str(properties_path(wd)) not in cmdline:
        return None  # stale pid file whose pid was reused
    return pid


def kafka_ports(workdir: Path | None = None, configured: Ports | None = None) -> Ports:
    """Ports the broker of ``workdir`` was last started with (else ``configured``, by
    default :func:`configured_ports`)."""
    state = read_state(resolve_workdir(workdir))
    conf = configured or configured_ports()
    sasl = state.get("kafka_sasl_port", conf.kafka_sasl)
    return replace(
        conf,
        kafka=state.get("kafka_port", conf.kafka),
        kafka_controller=state.get("kafka_controller_port", conf.kafka_controller),
        kafka_sasl=None if sasl == _NO_SASL else sasl,
    )


def sasl_bootstrap_servers(workdir: Path | None = None) -> str | None:
    """``bootstrap.servers`` of the SASL_PLAINTEXT listener of the broker of ``workdir``
    (as configured in its ``server.properties``), or None if it has none."""
    port = sasl_port(resolve_workdir(workdir))
    return None if port is None else bootstrap_servers(port)


def sasl_client_config(bootstrap: str) -> dict[str, str | int | float | bool]:
    """librdkafka settings that log in to the SASL listener ``bootstrap`` as ``relay``."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": SASL_LISTENER,
        "sasl.mechanism": SASL_MECHANISM,
        "sasl.username": SASL_USERNAME,
        "sasl.password": SASL_PASSWORD,
    }


def _client_conf(bootstrap: str) -> dict[str, str | int | float | bool]:
    # log_level 2 keeps librdkafka quiet about the refusals expected while the broker boots.
    return {
        "bootstrap.servers": bootstrap,
        "log_level": 2,
        "socket.connection.setup.timeout.ms": 3000,
    }


def kafka_answering(port: int, timeout: float = 3.0) -> bool:
    """True if a broker on ``port`` returns cluster metadata."""
    if not port_open(port):
        return False
    admin = AdminClient(_client_conf(bootstrap_servers(port)))
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(meta.brokers)


def _internal_topics_ready(admin: AdminClient, timeout: float) -> bool:
    meta = admin.list_topics(timeout=timeout)
    for name in ("__consumer_offsets", "__transaction_state"):
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            return False
        if any(p.leader < 0 for p in topic.partitions.values()):
            return False
    return True


def _warm_up(port: int, deadline: Deadline) -> None:
    """Wait until the broker can coordinate transactions and consumer groups: the first
    ``init_transactions``/FindCoordinator on a fresh broker creates ``__transaction_state``
    and ``__consumer_offsets``, which can take seconds; doing it here keeps tests fast."""
    bootstrap = bootstrap_servers(port)
    last: Exception | str | None = None
    while not deadline.expired():
        try:
            producer = Producer({**_client_conf(bootstrap), "transactional.id": _WARMUP_TXN_ID})
            producer.init_transactions(max(1.0, min(30.0, deadline.remaining())))
            admin = AdminClient(_client_conf(bootstrap))
            # describe_consumer_groups, not list_consumer_group_offsets: the latter segfaults
            # (confluent-kafka 2.16) while the group coordinator is still loading.
            for future in admin.describe_consumer_groups([_WARMUP_GROUP]).values():
                future.result(timeout=max(1.0, deadline.remaining()))
            if _internal_topics_ready(admin, 5.0):
                return
            last = "internal topics have partitions without a leader"
        except KafkaException as exc:
            last = exc
        time.sleep(0.5)
    raise DevEnvError(f"broker on {bootstrap} cannot coordinate transactions/groups yet: {last}")


def _check_sasl(bootstrap: str, deadline: Deadline) -> None:
    """Wait until the SASL listener ``bootstrap`` authenticates ``relay`` and serves metadata."""
    admin = AdminClient({**sasl_client_config(bootstrap), **_client_conf(bootstrap)})
    last: Exception | str | None = None
    while True:
        try:
            if admin.list_topics(timeout=max(1.0, min(5.0, deadline.remaining()))).brokers:
                return
            last = "no brokers in the metadata"
        except KafkaException as exc:
            last = exc
        if deadline.expired():
            raise DevEnvError(f"SASL listener {bootstrap} does not log {SASL_USERNAME} in: {last}")
        time.sleep(0.25)


# --- lifecycle -----------------------------------------------------------------------------


def start_kafka(
    workdir: Path | None = None,
    *,
    ports: Ports | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    overrides: Mapping[str, str] | None = None,
) -> str:
    """Start the broker of ``workdir`` unless it is running (resolving jars and formatting
    storage on first use), wait until it serves metadata, transactions and consumer groups,
    and return its (PLAINTEXT) bootstrap servers.

    A running broker keeps its ports; if its ``server.properties`` is not what this version
    of relay.devenv writes (e.g. it predates the SASL listener), it is restarted once with
    the current one."""
    wd = resolve_workdir(workdir)
    with workdir_lock(wd):
        deadline = Deadline(timeout)
        pid = kafka_pid(wd)
        if pid is not None:
            running = kafka_ports(wd)
            if properties_current(wd, running, overrides):
                port = running.kafka
            else:
                log.warning(
                    "the running Kafka broker (pid %d) has an outdated configuration; "
                    "restarting it with the current one",
                    pid,
                )
                stop_kafka(wd)
                pid, ports = None, running
        if pid is None:
            ports = ports or configured_ports()
            port = ports.kafka
            _check_ports_free(wd, ports)
            pid = _launch(wd, ports, timeout, overrides)
            # Resolving the jars (Maven, on a fresh clone) and formatting the storage are not
            # the broker's start: its ``timeout`` to answer runs from its launch.
            deadline = Deadline(timeout)
        if not wait_for(
            lambda: not pid_alive(pid) or kafka_answering(port, 2.0),
            deadline.remaining(),
            interval=0.25,
        ):
            raise failure(
                f"Kafka broker (pid {pid}) did not answer on {port} within {timeout:.0f}s",
                *logs(wd),
            )
        if not pid_alive(pid):
            raise failure(f"Kafka broker (pid {pid}) exited during startup", *logs(wd))
        try:
            _warm_up(port, deadline)
            sasl = sasl_bootstrap_servers(wd)
            if sasl is not None:
                _check_sasl(sasl, deadline)
        except DevEnvError as exc:
            raise failure(str(exc), server_log(wd)) from exc
        return bootstrap_servers(port)


def _check_ports_free(wd: Path, ports: Ports) -> None:
    wanted = (
        (ports.kafka, ENV_KAFKA_PORT),
        (ports.kafka_controller, ENV_CONTROLLER_PORT),
        (ports.kafka_sasl, ENV_KAFKA_SASL_PORT),
    )
    for p, env in wanted:
        if p is not None and port_open(p):
            raise DevEnvError(
                f"{LOOPBACK}:{p} is already in use by another process (not the Kafka "
                f"broker of {wd}); stop it or choose another port with {env}"
            )


def _launch(
    wd: Path, ports: Ports, timeout: float, overrides: Mapping[str, str] | None = None
) -> int:
    kdir = kafka_dir(wd)
    kdir.mkdir(parents=True, exist_ok=True)
    libs = ensure_libs(wd)
    log4j = kdir / "log4j.properties"
    shutil.copyfile(infra_file("log4j.properties"), log4j)
    props = write_properties(wd, ports, overrides)
    format_storage(wd, props, timeout)
    argv = [
        java(),
        *JVM_OPTS,
        f"-Dlog4j.configuration=file:{log4j}",
        f"-Dkafka.logs.dir={kdir}",
        "-cp",
        str(libs / "*"),
        "kafka.Kafka",
        str(props),
    ]
    sasl = "no SASL" if ports.kafka_sasl is None else f"SASL port {ports.kafka_sasl}"
    log.info(
        "starting Kafka broker on %s:%d (%s, controller port %d)",
        LOOPBACK,
        ports.kafka,
        sasl,
        ports.kafka_controller,
    )
    pid = spawn_detached(argv, cwd=kdir, output=console_log(wd))
    pidfile(wd).write_text(f"{pid}\n")
    write_state(
        wd,
        kafka_port=ports.kafka,
        kafka_controller_port=ports.kafka_controller,
        kafka_sasl_port=_NO_SASL if ports.kafka_sasl is None else ports.kafka_sasl,
    )
    return pid


def stop_kafka(workdir: Path | None = None, hard: bool = False, *, timeout: float = 30.0) -> None:
    """Stop the broker of ``workdir``: SIGTERM (controlled shutdown), SIGKILL after
    ``timeout`` seconds; SIGKILL at once when ``hard`` (a crash). No-op if stopped."""
    wd = resolve_workdir(workdir)
    with workdir_lock(wd):
        pid = kafka_pid(wd)
        if pid is not None:
            log.info("stopping Kafka broker (pid %d%s)", pid, ", SIGKILL" if hard else "")
            terminate(pid, hard=hard, timeout=timeout)
        pidfile(wd).unlink(missing_ok=True)


def restart_kafka(
    workdir: Path | None = None, hard: bool = True, *, timeout: float = DEFAULT_TIMEOUT
) -> str:
    """Stop the broker (SIGKILL when ``hard``) and start it again on the same ports."""
    wd = resolve_workdir(workdir)
    with workdir_lock(wd):
        ports = kafka_ports(wd)
        stop_kafka(wd, hard)
        return start_kafka(wd, ports=ports, timeout=timeout)
