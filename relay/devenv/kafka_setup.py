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
from pathlib import Path

from .common import LOOPBACK, DevEnvError, Ports

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


def kafka_dir(workdir: Path) -> Path:
    return workdir / "kafka"


def libs_dir(workdir: Path) -> Path:
    return workdir / "kafka-libs"


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
    marker = libs / ".resolved"
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
    (staging / ".resolved").write_text(digest + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    return libs


def classpath(workdir: Path) -> str:
    return str(libs_dir(workdir) / "*")


def write_properties(workdir: Path, ports: Ports) -> Path:
    kdir = kafka_dir(workdir)
    settings = {
        **BROKER_SETTINGS,
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


def format_storage(workdir: Path, props: Path, timeout: float) -> None:
    if (kafka_dir(workdir) / "data" / "meta.properties").is_file():
        return
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
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
        "-t",
        cluster_id,
        "-c",
        str(props),
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
