"""A single-node KRaft Kafka broker in ``<workdir>/kafka`` for development and tests.

The broker jars are resolved from Maven Central by ``infra/pom.xml`` into
``<workdir>/kafka-libs`` (once) and the broker runs as ``java -cp 'kafka-libs/*' kafka.Kafka``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from .common import (
    DEFAULT_TIMEOUT,
    ENV_CONTROLLER_PORT,
    ENV_KAFKA_PORT,
    LOOPBACK,
    DevEnvError,
    Ports,
    configured_ports,
    failure,
    pid_alive,
    port_open,
    process_cmdline,
    read_pid,
    read_state,
    resolve_workdir,
    spawn_detached,
    terminate,
    wait_for,
    workdir_lock,
    write_state,
)

log = logging.getLogger("relay.devenv.kafka")

INFRA_DIR = Path(__file__).resolve().parents[2] / "infra"
JVM_OPTS = (
    "-Xmx512m",
    "-Xms256m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-Djava.awt.headless=true",
)
_WARMUP_TXN_ID = "relay-devenv-warmup"
_WARMUP_GROUP = "relay-devenv-warmup"

# Broker settings for one node that is both controller and broker, tuned for fast tests.
_BROKER_SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "auto.create.topics.enable": "false",
    "delete.topic.enable": "true",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "10",
    "transaction.max.timeout.ms": "900000",
    "group.initial.rebalance.delay.ms": "0",
    # After a crash (SIGKILL) the restarted broker cannot re-register until the controller
    # expires the old incarnation's session (DUPLICATE_BROKER_REGISTRATION): the default
    # 9 s timeout makes every kill-and-restart take ~15 s; these make it ~5 s.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "log.retention.hours": "168",
    "log.segment.bytes": "67108864",
    "log.retention.check.interval.ms": "300000",
}


def _dir(workdir: Path) -> Path:
    return workdir / "kafka"


def _libs(workdir: Path) -> Path:
    return workdir / "kafka-libs"


def _pidfile(workdir: Path) -> Path:
    return _dir(workdir) / "kafka.pid"


def server_log(workdir: Path) -> Path:
    """log4j output of the broker."""
    return _dir(workdir) / "server.log"


def console_log(workdir: Path) -> Path:
    """stdout/stderr of the broker JVM (JVM-level failures only; log4j writes server.log)."""
    return _dir(workdir) / "console.log"


def _logs(workdir: Path) -> tuple[Path, Path]:
    return server_log(workdir), console_log(workdir)


def bootstrap_servers(port: int) -> str:
    return f"{LOOPBACK}:{port}"


def _infra_file(name: str) -> Path:
    path = INFRA_DIR / name
    if not path.is_file():
        raise DevEnvError(f"{path} not found; relay.devenv needs the repository's infra/ directory")
    return path


def _tool(name: str, env_hint: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise DevEnvError(f"'{name}' not found on PATH; {env_hint}")
    return found


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    return _tool("java", "install a JDK/JRE 17 (Debian: apt-get install openjdk-17-jre-headless)")


# --- jars and storage ----------------------------------------------------------------------


def ensure_libs(workdir: Path, timeout: float = 600.0) -> Path:
    """Resolve the broker jars with Maven into ``<workdir>/kafka-libs`` unless already done
    for the current ``infra/pom.xml``; returns the directory."""
    libs = _libs(workdir)
    marker = libs / ".resolved"
    pom = INFRA_DIR / "pom.xml"
    if not pom.is_file() and marker.is_file():
        return libs  # no repository around (installed package); reuse what was resolved
    digest = hashlib.sha256(_infra_file("pom.xml").read_bytes()).hexdigest()
    if marker.is_file() and marker.read_text().strip() == digest:
        return libs
    mvn = _tool("mvn", "install Maven (Debian: apt-get install maven)")
    staging = workdir / "kafka-libs.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    log.info("resolving Kafka broker jars with Maven into %s", libs)
    argv = [
        mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom),
        "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
    ]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise DevEnvError(f"Maven did not resolve the Kafka jars within {timeout:.0f}s") from None
    if res.returncode != 0 or not any(staging.glob("kafka_*.jar")):
        raise DevEnvError(f"Maven failed to resolve the Kafka jars (exit {res.returncode}):\n"
                          f"{(res.stdout + res.stderr)[-4000:]}")
    (staging / ".resolved").write_text(digest + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    return libs


def _classpath(workdir: Path) -> str:
    return str(_libs(workdir) / "*")


def _write_properties(workdir: Path, ports: Ports) -> Path:
    kdir = _dir(workdir)
    settings = {
        **_BROKER_SETTINGS,
        "listeners": f"PLAINTEXT://{LOOPBACK}:{ports.kafka},CONTROLLER://{LOOPBACK}:{ports.kafka_controller}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{ports.kafka}",
        "controller.quorum.voters": f"1@{LOOPBACK}:{ports.kafka_controller}",
        "log.dirs": str(kdir / "data"),
    }
    props = kdir / "server.properties"
    lines = ["# Written by relay.devenv on every start; local edits are overwritten."]
    lines += [f"{key}={value}" for key, value in settings.items()]
    props.write_text("\n".join(lines) + "\n")
    return props


def _format_storage(workdir: Path, props: Path, timeout: float) -> None:
    if (_dir(workdir) / "data" / "meta.properties").is_file():
        return
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    log.info("formatting Kafka storage (cluster id %s)", cluster_id)
    kdir = _dir(workdir)
    argv = [
        _java(), "-Xmx256m", f"-Dlog4j.configuration=file:{kdir / 'log4j.properties'}",
        f"-Dkafka.logs.dir={kdir}", "-cp", _classpath(workdir), "kafka.tools.StorageTool",
        "format", "--ignore-formatted", "-t", cluster_id, "-c", str(props),
    ]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise DevEnvError(f"StorageTool format did not finish in {timeout:.0f}s") from None
    if res.returncode != 0:
        raise DevEnvError(f"formatting Kafka storage failed (exit {res.returncode}):\n"
                          f"{(res.stdout + res.stderr)[-4000:]}")


# --- state queries -------------------------------------------------------------------------


def kafka_pid(workdir: Path | None = None) -> int | None:
    """Pid of the running broker of ``workdir``, or None."""
    wd = resolve_workdir(workdir)
    pid = read_pid(_pidfile(wd))
    if pid is None or not pid_alive(pid):
        return None
    cmdline = process_cmdline(pid)
    if cmdline is not None and str(_dir(wd) / "server.properties") not in cmdline:
        return None  # stale pid file whose pid was reused
    return pid


def kafka_ports(workdir: Path | None = None) -> Ports:
    """Ports the broker of ``workdir`` was last started with (else the configured ones)."""
    state = read_state(resolve_workdir(workdir))
    conf = configured_ports()
    return Ports(
        postgres=conf.postgres,
        kafka=state.get("kafka_port", conf.kafka),
        kafka_controller=state.get("kafka_controller_port", conf.kafka_controller),
    )


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


def _warm_up(port: int, deadline: float) -> None:
    """Wait until the broker can coordinate transactions and consumer groups: the first
    ``init_transactions``/FindCoordinator on a fresh broker creates ``__transaction_state``
    and ``__consumer_offsets``, which can take seconds; doing it here keeps tests fast."""
    bootstrap = bootstrap_servers(port)
    last: Exception | str | None = None
    while time.monotonic() < deadline:
        try:
            producer = Producer({**_client_conf(bootstrap), "transactional.id": _WARMUP_TXN_ID})
            producer.init_transactions(max(1.0, min(30.0, deadline - time.monotonic())))
            admin = AdminClient(_client_conf(bootstrap))
            # describe_consumer_groups, not list_consumer_group_offsets: the latter segfaults
            # (confluent-kafka 2.16) while the group coordinator is still loading.
            for future in admin.describe_consumer_groups([_WARMUP_GROUP]).values():
                future.result(timeout=max(1.0, deadline - time.monotonic()))
            if _internal_topics_ready(admin, 5.0):
                return
            last = "internal topics have partitions without a leader"
        except KafkaException as exc:
            last = exc
        time.sleep(0.5)
    raise DevEnvError(f"broker on {bootstrap} cannot coordinate transactions/groups yet: {last}")


# --- lifecycle -----------------------------------------------------------------------------


def start_kafka(
    workdir: Path | None = None, *, ports: Ports | None = None, timeout: float = DEFAULT_TIMEOUT
) -> str:
    """Start the broker of ``workdir`` unless it is running (resolving jars and formatting
    storage on first use), wait until it serves metadata, transactions and consumer groups,
    and return its bootstrap servers."""
    wd = resolve_workdir(workdir)
    with workdir_lock(wd):
        deadline = time.monotonic() + timeout
        pid = kafka_pid(wd)
        if pid is not None:
            port = kafka_ports(wd).kafka
        else:
            ports = ports or configured_ports()
            port = ports.kafka
            wanted = ((ports.kafka, ENV_KAFKA_PORT), (ports.kafka_controller, ENV_CONTROLLER_PORT))
            for p, env in wanted:
                if port_open(p):
                    raise DevEnvError(
                        f"{LOOPBACK}:{p} is already in use by another process (not the Kafka "
                        f"broker of {wd}); stop it or choose another port with {env}"
                    )
            pid = _launch(wd, ports, timeout)
        if not wait_for(lambda: not pid_alive(pid) or kafka_answering(port, 2.0),
                        max(0.0, deadline - time.monotonic()), interval=0.25):
            raise failure(
                f"Kafka broker (pid {pid}) did not answer on {port} within {timeout:.0f}s",
                *_logs(wd),
            )
        if not pid_alive(pid):
            raise failure(f"Kafka broker (pid {pid}) exited during startup", *_logs(wd))
        try:
            _warm_up(port, deadline)
        except DevEnvError as exc:
            raise failure(str(exc), server_log(wd)) from exc
        return bootstrap_servers(port)


def _launch(wd: Path, ports: Ports, timeout: float) -> int:
    kdir = _dir(wd)
    kdir.mkdir(parents=True, exist_ok=True)
    libs = ensure_libs(wd)
    log4j = kdir / "log4j.properties"
    shutil.copyfile(_infra_file("log4j.properties"), log4j)
    props = _write_properties(wd, ports)
    _format_storage(wd, props, timeout)
    argv = [_java(), *JVM_OPTS, f"-Dlog4j.configuration=file:{log4j}", f"-Dkafka.logs.dir={kdir}",
            "-cp", str(libs / "*"), "kafka.Kafka", str(props)]
    log.info("starting Kafka broker on %s:%d (controller port %d)",
             LOOPBACK, ports.kafka, ports.kafka_controller)
    pid = spawn_detached(argv, cwd=kdir, output=console_log(wd))
    _pidfile(wd).write_text(f"{pid}\n")
    write_state(wd, kafka_port=ports.kafka, kafka_controller_port=ports.kafka_controller)
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
        _pidfile(wd).unlink(missing_ok=True)


def restart_kafka(
    workdir: Path | None = None, hard: bool = True, *, timeout: float = DEFAULT_TIMEOUT
) -> str:
    """Stop the broker (SIGKILL when ``hard``) and start it again on the same ports."""
    wd = resolve_workdir(workdir)
    with workdir_lock(wd):
        ports = kafka_ports(wd)
        stop_kafka(wd, hard)
        return start_kafka(wd, ports=ports, timeout=timeout)
