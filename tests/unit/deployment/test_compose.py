"""docker-compose.yml as `docker compose up` reads it: each service uses the right image
and health check, the services start in order, the mirror finds every table and topic its
mapping names, and every ``RELAY_*`` variable set is one the relay reads."""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.cli import build_parser
from relay.settings.mirror import load_mirror_settings
from relay.settings.relay import load_settings
from tests.unit.deployment.model import (
    DEFAULT_TARGET,
    ROOT,
    SPARK_TARGET,
    STAGES,
    image_env,
    image_jobs,
    last,
)

# --- docker-compose.yml -----------------------------------------------------------------

COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]


def target_of(service: Mapping[str, Any]) -> str | None:
    """The Dockerfile target a service is built from (None: an image from elsewhere)."""
    build = service.get("build")
    if build is None:
        return None
    assert isinstance(build, dict) and build.get("target"), "name the Dockerfile target"
    assert build.get("context", ".") == ".", "the build context is the checkout"
    return str(build["target"])


BUILT_HERE = {name: target_of(s) for name, s in SERVICES.items() if target_of(s) is not None}


def argv(name: str) -> list[str]:
    """What the service's container runs: its entrypoint and command, or the image's."""
    service, target = SERVICES[name], BUILT_HERE.get(name)
    entrypoint = service.get("entrypoint")
    if entrypoint is None:
        entrypoint = last(target, "ENTRYPOINT").words() if target else []
    command = service.get("command")
    if command is None:
        command = last(target, "CMD").words() if target and "entrypoint" not in service else []
    return [*entrypoint, *command]


def role(name: str) -> str:
    """relay | mirror | job | migrate | other: what the service runs."""
    run = argv(name)
    if run[:1] == ["spark-submit"]:
        return "job"
    if run[:2] == ["relay", "run"]:
        return "relay"
    if run[:2] == ["relay", "mirror"]:
        return "mirror"
    if run[:3] == ["relay", "db", "upgrade"]:
        return "migrate"
    return "other"


def dependencies(name: str) -> dict[str, str]:
    """The services ``name`` waits for and the condition of each."""
    depends = SERVICES[name].get("depends_on", {})
    assert isinstance(depends, dict), f"{name}: give depends_on conditions, not a list"
    return {other: spec["condition"] for other, spec in depends.items()}


def waits_for(name: str) -> set[str]:
    """Every service ``name`` waits for, directly or not."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for other in dependencies(todo.pop()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def test_each_service_built_here_uses_the_right_image() -> None:
    assert BUILT_HERE, "no service is built from the Dockerfile"
    assert {role(name) for name in MIRRORS} == {"mirror", "job"}, "the mirror and its job"
    tags: dict[str, set[str]] = {}
    for name, target in BUILT_HERE.items():
        assert target in STAGES, f"{name}: no stage {target} in the Dockerfile"
        expected = SPARK_TARGET if role(name) == "job" else DEFAULT_TARGET
        assert target == expected, f"{name} runs {argv(name)[:3]} on target {target}"
        tags.setdefault(target, set()).add(SERVICES[name].get("image", ""))
    for target, images in tags.items():
        assert len(images) == 1 and "" not in images, (
            f"target {target}: one image tag, not {images}"
        )
    jobs = [name for name in BUILT_HERE if role(name) == "job"]
    assert jobs, "no Spark job service"
    for name in jobs:
        script = next(w for w in argv(name)[1:] if w.endswith(".py"))
        assert script in image_jobs(), f"{name} runs {script}, which is not in the image"


def test_each_service_built_here_checks_its_health_or_says_it_has_none() -> None:
    for name in BUILT_HERE:
        check = SERVICES[name].get("healthcheck")
        assert isinstance(check, dict), f"{name}: no healthcheck (give one or disable it)"
        if role(name) in ("relay", "mirror"):
            assert not check.get("disable"), f"{name} serves /healthz: check it"
            assert "/healthz" in " ".join(check["test"])
            assert SERVICES[name]["environment"].get("RELAY_METRICS_PORT"), (
                f"{name}: the health check needs RELAY_METRICS_PORT"
            )
        else:
            assert check.get("disable") is True, f"{name} serves nothing: disable the check"


def test_services_start_in_order() -> None:
    (migrate,) = [name for name in SERVICES if role(name) == "migrate"]
    for name in SERVICES:
        for other, condition in dependencies(name).items():
            assert other in SERVICES, f"{name} waits for {other}, which is no service"
            assert name not in waits_for(other), f"{name} and {other} wait for each other"
            if condition == "service_healthy":
                has_check = "test" in SERVICES[other].get("healthcheck", {}) or (
                    other in BUILT_HERE and last(BUILT_HERE[other], "HEALTHCHECK").args != "NONE"
                )
                assert has_check, f"{name} waits for {other} to be healthy: it has no check"
            else:
                assert condition == "service_completed_successfully", f"{name}: {condition}"
                assert SERVICES[other].get("restart", "no") == "no", f"{other}: a one-shot"
                assert role(other) not in ("relay", "mirror", "job"), f"{other} never ends"
    workers = [name for name in SERVICES if role(name) in ("relay", "mirror", "job")]
    assert {role(name) for name in workers} == {"relay", "mirror", "job"}
    for name in workers:
        assert dependencies(name).get(migrate) == "service_completed_successfully", (
            f"{name} must start after `relay db upgrade` completed"
        )
        for server in ("postgres", "kafka"):
            assert dependencies(name).get(server) == "service_healthy", (
                f"{name} must wait for {server} to be healthy"
            )
    assert dependencies(migrate).get("postgres") == "service_healthy"


def _mounted(name: str, container_path: str) -> Path | None:
    """The host file or directory the service mounts at (or above) ``container_path``."""
    for volume in SERVICES[name].get("volumes", []):
        host, _, rest = volume.partition(":")
        inside = rest.split(":")[0]
        if host.startswith((".", "/")) and (
            container_path == inside or container_path.startswith(inside.rstrip("/") + "/")
        ):
            return ROOT / host / Path(container_path).relative_to(inside)
    return None


def _one_shot_text(name: str) -> str:
    """What the services ``name`` waits for run: their commands, and the files of the
    checkout they mount and name in them."""
    texts = []
    for other in waits_for(name):
        run = " ".join(argv(other))
        texts.append(run)
        for volume in SERVICES[other].get("volumes", []):
            host, _, rest = volume.partition(":")
            inside = rest.split(":")[0].rstrip("/")
            if host.startswith((".", "/")) and (ROOT / host).is_dir():
                texts += [
                    path.read_text()
                    for path in sorted((ROOT / host).iterdir())
                    if f"{inside}/{path.name}" in run
                ]
    return "\n".join(texts)


def _is_mirror(name: str) -> bool:
    run = argv(name)
    return role(name) == "mirror" or (
        role(name) == "job" and any(Path(w).name == "mirror.py" for w in run)
    )


MIRRORS = [name for name in BUILT_HERE if _is_mirror(name)]


@pytest.mark.parametrize("name", MIRRORS)
def test_the_mirror_finds_every_table_and_topic_it_maps(name: str) -> None:
    """`relay mirror` exits 2 at start-up on a mapped table or topic that does not exist
    (and a restart policy would start it again and again): the services it waits for
    create each one first."""
    config = SERVICES[name]["environment"].get("RELAY_MIRROR_CONFIG")
    assert config, f"{name}: no RELAY_MIRROR_CONFIG"
    mapping_file = _mounted(name, config)
    assert mapping_file is not None and mapping_file.is_file(), f"{name}: {config} not mounted"
    mapping = tomllib.loads(mapping_file.read_text())
    created = _one_shot_text(name)
    for table in mapping["tables"]:
        name_re = re.escape(table["table"])
        assert re.search(
            rf"create_table\(\s*[\"']{name_re}[\"']|CREATE TABLE (IF NOT EXISTS )?{name_re}\b",
            created,
        ), f"{name} maps table {table['table']}, which no service it waits for creates"
        for topic in table["topics"]:
            assert re.search(rf"--create\b.*--topic[ =]{re.escape(topic)}(\s|$)", created), (
                f"{name} maps topic {topic}, which no service it waits for creates"
            )


class _Asked(Mapping[str, str]):
    """An environment that remembers every variable looked up in it."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _variables_read() -> set[str]:
    """The RELAY_* variables the relay reads: the settings loaders' and the CLI's."""
    environ = _Asked(
        {
            "RELAY_DATABASE_URL": "postgresql+psycopg://u:p@db/relay",
            "RELAY_KAFKA_BOOTSTRAP_SERVERS": "kafka:9092",
            "RELAY_MIRROR_CONFIG": "mirror.toml",
        }
    )
    load_settings(environ=environ)
    load_mirror_settings(environ=environ)
    names = set(environ.asked)
    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            names.update(re.findall(r"\[(RELAY_[A-Z0-9_]+)", action.help or ""))
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return names


def test_compose_and_the_image_set_only_variables_the_relay_reads() -> None:
    known = _variables_read()
    assert {"RELAY_DATABASE_URL", "RELAY_MIRROR_GROUP", "RELAY_METRICS_PORT"} <= known
    for name in BUILT_HERE:
        for variable in SERVICES[name].get("environment", {}):
            if variable.startswith("RELAY_"):
                assert variable in known, f"{name} sets {variable}, which the relay never reads"
    for target in (DEFAULT_TARGET, SPARK_TARGET):
        for variable in image_env(target):
            if variable.startswith("RELAY_"):
                assert variable in known, f"target {target} sets {variable}"


# --- state that must outlive `docker compose down && up` ---------------------------------

# Where each image keeps its data unless told otherwise (apache/kafka's Dockerfile declares
# /var/lib/kafka/data a volume, but its broker writes log.dirs, /tmp/kraft-combined-logs by
# default, unless KAFKA_LOG_DIRS says otherwise).
DATA_DIRS = {"postgres": ("PGDATA", "/var/lib/postgresql/data"), "kafka": ("KAFKA_LOG_DIRS", None)}


@pytest.mark.parametrize("name", sorted(DATA_DIRS))
def test_each_server_keeps_its_data_in_its_named_volume(name: str) -> None:
    """PostgreSQL (with the published floor) and Kafka (with the positions) are kept or lost
    together: a broker writing outside its volume loses the positions on `down && up` while
    the database keeps its floor, and the relay then refuses to start."""
    service = SERVICES[name]
    variable, default = DATA_DIRS[name]
    data_dir = service.get("environment", {}).get(variable, default)
    assert data_dir is not None, f"{name}: set {variable} to the directory of its volume"
    mounts = {m.split(":")[1]: m.split(":")[0] for m in service.get("volumes", [])}
    assert mounts.get(data_dir) in COMPOSE["volumes"], (
        f"{name} writes {data_dir}, which is not a named volume (mounted: {mounts})"
    )


def test_published_ports_leave_the_development_servers_theirs() -> None:
    """`relay dev up` and `docker compose up` can run on one machine."""
    from relay.devenv.workdir import (
        DEFAULT_CONTROLLER_PORT,
        DEFAULT_KAFKA_PORT,
        DEFAULT_KAFKA_SASL_PORT,
        DEFAULT_PG_PORT,
        DEFAULT_TARGET_CONTROLLER_PORT,
        DEFAULT_TARGET_KAFKA_PORT,
    )

    dev = {
        DEFAULT_PG_PORT,
        DEFAULT_KAFKA_PORT,
        DEFAULT_CONTROLLER_PORT,
        DEFAULT_KAFKA_SASL_PORT,
        DEFAULT_TARGET_KAFKA_PORT,
        DEFAULT_TARGET_CONTROLLER_PORT,
    }
    published = {
        int(port.split(":")[-2]): name
        for name, service in SERVICES.items()
        for port in service.get("ports", [])
    }
    assert not dev & set(published), {p: published[p] for p in dev & set(published)}


def test_postgres_keeps_the_commit_timestamps_the_relay_orders_by() -> None:
    """`relay db upgrade` refuses a server without ``track_commit_timestamp``
    (0017_relay_drawn_positions): the sketch's server has it on."""
    command = COMPOSE["services"]["postgres"]["command"]
    assert command[0] == "postgres"
    settings = [command[i + 1] for i, arg in enumerate(command[:-1]) if arg == "-c"]
    assert "track_commit_timestamp=on" in settings
