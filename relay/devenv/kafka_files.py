"""On-disk side of the development Kafka broker: the jars (resolved by Maven from
``infra/pom.xml`` into ``<workdir>/kafka-libs``), ``server.properties``, log4j configuration
and KRaft storage formatting under ``<workdir>/kafka``."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

from relay.errors import DevEnvError

from .workdir import LOOPBACK, Ports

log = logging.getLogger("relay.devenv.kafka")

INFRA_DIR = Path(__file__).resolve().parents[2] / "infra"
JVM_OPTS = (
    "-Xmx512m",
    "-Xms256m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-Djava.awt.headless=true",
)

# Broker settings for one node that is both controller and broker, tuned for fast tests.
BROKER_SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": (
        "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
    ),
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


# The SASL_PLAINTEXT listener (PLAIN mechanism) for clients that authenticate; inter-broker
# and controller traffic stay on PLAINTEXT. Fixed passwords: the broker only listens on
# loopback. ``admin`` is the listener's own (unused, PLAINTEXT is inter-broker) login.
SASL_LISTENER = "SASL_PLAINTEXT"
SASL_MECHANISM = "PLAIN"
SASL_USERNAME = "relay"
SASL_PASSWORD = "relay-dev-secret"  # noqa: S105 - loopback-only dev broker
SASL_ADMIN_USERNAME = "admin"
SASL_ADMIN_PASSWORD = "admin-dev-secret"  # noqa: S105 - loopback-only dev broker
_SASL_USERS = {SASL_ADMIN_USERNAME: SASL_ADMIN_PASSWORD, SASL_USERNAME: SASL_PASSWORD}
_PROPERTIES_HEADER = "# Written by relay.devenv on every start; local edits are overwritten."
_RESOLVED_MARKER = ".resolved"  # in kafka-libs: the digest of the pom.xml it was resolved for


def kafka_dir(workdir: Path) -> Path:
    return workdir / "kafka"


def libs_dir(workdir: Path) -> Path:
    return workdir / "kafka-libs"


def libs_resolved(workdir: Path) -> bool:
    """True if ``<workdir>/kafka-libs`` holds jars Maven resolved (for some pom.xml)."""
    return (libs_dir(workdir) / _RESOLVED_MARKER).is_file()


def pidfile(workdir: Path) -> Path:
    return kafka_dir(workdir) / "kafka.pid"


def server_log(workdir: Path) -> Path:
    """log4j output of the broker."""
    return kafka_dir(workdir) / "server.log"


def console_log(workdir: Path) -> Path:
    """stdout/stderr of the broker JVM (JVM-level failures only; log4j writes server.log)."""
    return kafka_dir(workdir) / "console.log"


def logs(workdir: Path) -> tuple[Path, Path]:
    """Logs worth showing when the broker fails: the JVM's console (usually short), then log4j."""
    return console_log(workdir), server_log(workdir)


def infra_file(name: str) -> Path:
    path = INFRA_DIR / name
    if not path.is_file():
        raise DevEnvError(f"{path} not found; relay.devenv needs the repository's infra/ directory")
    return path


def _tool(name: str, env_hint: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise DevEnvError(f"'{name}' not found on PATH; {env_hint}")
    return found


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    return _tool("java", "install a JDK/JRE 17 (Debian: apt-get install openjdk-17-jre-headless)")


# --- jars and storage ----------------------------------------------------------------------


def ensure_libs(workdir: Path, timeout: float = 600.0) -> Path:
    """Resolve the broker jars with Maven into ``<workdir>/kafka-libs`` unless already done
    for the current ``infra/pom.xml``; returns the directory."""
    libs = libs_dir(workdir)
    marker = libs / _RESOLVED_MARKER
    pom = INFRA_DIR / "pom.xml"
    if not pom.is_file() and marker.is_file():
        return libs  # no repository around (installed package); reuse what was resolved
    digest = hashlib.sha256(infra_file("pom.xml").read_bytes()).hexdigest()
    if marker.is_file() and marker.read_text().strip() == digest:
        return libs
    mvn = _tool("mvn", "install Maven (Debian: apt-get install maven)")
    staging = workdir / "kafka-libs.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    log.info("resolving Kafka broker jars with Maven into %s", libs)
    argv = [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise DevEnvError(f"Maven did not resolve the Kafka jars within {timeout:.0f}s") from None
    if res.returncode != 0 or not any(staging.glob("kafka_*.jar")):
        raise DevEnvError(
            f"Maven failed to resolve the Kafka jars (exit {res.returncode}):\n"
            f"{(res.stdout + res.stderr)[-4000:]}"
        )
    (staging / _RESOLVED_MARKER).write_text(digest + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    return libs


def classpath(workdir: Path) -> str:
    return str(libs_dir(workdir) / "*")


def _jaas_config() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in _SASL_USERS.items())
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{SASL_ADMIN_USERNAME}" password="{SASL_ADMIN_PASSWORD}" {users};'
    )


def properties_path(workdir: Path) -> Path:
    return kafka_dir(workdir) / "server.properties"


def broker_properties(
    workdir: Path, ports: Ports, overrides: Mapping[str, str] | None = None
) -> str:
    """Text of ``server.properties`` for a broker of ``workdir`` on ``ports`` (without a
    SASL listener when ``ports.kafka_sasl`` is None), with ``overrides`` (e.g.
    ``offsets.retention.minutes`` for a test's own broker) on top."""
    kdir = kafka_dir(workdir)
    plaintext = f"PLAINTEXT://{LOOPBACK}:{ports.kafka}"
    controller = f"CONTROLLER://{LOOPBACK}:{ports.kafka_controller}"
    listeners = {"listeners": f"{plaintext},{controller}", "advertised.listeners": plaintext}
    if ports.kafka_sasl is not None:
        sasl = SASL_LISTENER.lower()
        sasl_listener = f"{SASL_LISTENER}://{LOOPBACK}:{ports.kafka_sasl}"
        listeners = {
            "listeners": f"{plaintext},{sasl_listener},{controller}",
            "advertised.listeners": f"{plaintext},{sasl_listener}",
            f"listener.name.{sasl}.sasl.enabled.mechanisms": SASL_MECHANISM,
            f"listener.name.{sasl}.{SASL_MECHANISM.lower()}.sasl.jaas.config": _jaas_config(),
        }
    settings = {
        **BROKER_SETTINGS,
        **listeners,
        "controller.quorum.voters": f"1@{LOOPBACK}:{ports.kafka_controller}",
        "log.dirs": str(kdir / "data"),
        **(overrides or {}),
    }
    lines = [_PROPERTIES_HEADER, *(f"{key}={value}" for key, value in settings.items())]
    return "\n".join(lines) + "\n"


def write_properties(
    workdir: Path, ports: Ports, overrides: Mapping[str, str] | None = None
) -> Path:
    """Write ``server.properties`` (owner-only: it holds the SASL passwords)."""
    props = properties_path(workdir)
    tmp = props.with_suffix(".tmp")
    tmp.write_text(broker_properties(workdir, ports, overrides))
    tmp.chmod(0o600)
    tmp.replace(props)
    return props


def properties_current(
    workdir: Path, ports: Ports, overrides: Mapping[str, str] | None = None
) -> bool:
    """True if ``server.properties`` is what :func:`write_properties` would write now."""
    try:
        wanted = broker_properties(workdir, ports, overrides)
        return properties_path(workdir).read_text() == wanted
    except OSError:
        return False


def sasl_port(workdir: Path) -> int | None:
    """Port of the SASL listener in ``server.properties``, or None (no file, or written
    by an older relay.devenv without the listener)."""
    try:
        lines = properties_path(workdir).read_text().splitlines()
    except OSError:
        return None
    prefix = f"{SASL_LISTENER}://{LOOPBACK}:"
    for line in lines:
        name, _, value = line.partition("=")
        if name.strip() != "advertised.listeners":
            continue
        for listener in value.split(","):
            port = listener.strip().removeprefix(prefix)
            if port != listener.strip() and port.isdigit():
                return int(port)
    return None


def new_cluster_id() -> str:
    """A random KRaft cluster id: a URL-safe base64 UUID that, like Kafka's own
    ``Uuid.randomUuid()``, never starts with ``-`` (command lines would read it as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def format_storage(
    workdir: Path, props: Path, timeout: float, cluster_id: str | None = None
) -> None:
    """Format the broker's storage once (kept if ``meta.properties`` exists)."""
    if (kafka_dir(workdir) / "data" / "meta.properties").is_file():
        return
    cluster_id = cluster_id or new_cluster_id()
    log.info("formatting Kafka storage (cluster id %s)", cluster_id)
    kdir = kafka_dir(workdir)
    argv = [
        java(),
        "-Xmx256m",
        f"-Dlog4j.configuration=file:{kdir / 'log4j.properties'}",
        f"-Dkafka.logs.dir={kdir}",
        "-cp",
        classpath(workdir),
        "kafka.tools.StorageTool",
        "format",
        "--ignore-formatted",
        f"--cluster-id={cluster_id}",
        f"--config={props}",
    ]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise DevEnvError(f"StorageTool format did not finish in {timeout:.0f}s") from None
    if res.returncode != 0:
        raise DevEnvError(
            f"formatting Kafka storage failed (exit {res.returncode}):\n"
            f"{(res.stdout + res.stderr)[-4000:]}"
        )
