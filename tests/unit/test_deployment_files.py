"""The deployment files, read as a build and a `docker compose up` would read them.

There is no Docker engine here, so these tests parse the Dockerfile, .dockerignore and
docker-compose.yml and check what would otherwise break only at deploy time: the images
install the wheel and nothing of the source tree, the image without Spark has no Java,
both run unprivileged, the build context holds what the Dockerfile copies and nothing
private, each compose service uses the right image and health check, the services start
in order, the mirror finds every table and topic its mapping names, and every ``RELAY_*``
variable set is one the relay reads.
"""

from __future__ import annotations

import argparse
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.cli import build_parser
from relay.settings.mirror import load_mirror_settings
from relay.settings.relay import load_settings

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TARGET = "relay"  # relay run | mirror | db ...: no Java, no Spark
SPARK_TARGET = "relay-spark"
JAVA_OR_SPARK = re.compile(r"java|jdk|jre|spark", re.IGNORECASE)


# --- the Dockerfile ------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: RUN, COPY, ...
    args: str
    line: int

    def flags(self) -> dict[str, str]:
        """The leading ``--name=value`` flags (``COPY --from=wheel``, ``RUN --mount=...``)."""
        found: dict[str, str] = {}
        for word in self.args.split():
            if not word.startswith("--"):
                break
            name, _, value = word[2:].partition("=")
            found[name] = value
        return found

    def text(self) -> str:
        """The arguments without the leading flags."""
        rest = self.args.split(" ")
        while rest and rest[0].startswith("--"):
            rest.pop(0)
        return " ".join(rest).strip()

    def words(self) -> list[str]:
        """The arguments without the leading flags: JSON (exec) form or shell words."""
        if self.text().startswith("["):
            return list(yaml.safe_load(self.text()))
        return shlex.split(self.text())


@dataclass(frozen=True)
class Stage:
    name: str
    base: str
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, instruction) with continuation lines joined and comments dropped."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        yield start, " ".join(pending)
        pending = []
    assert not pending, "the Dockerfile ends inside a continued line"


def parse_dockerfile(text: str) -> list[Stage]:
    stages: list[Stage] = []
    current: list[Instruction] = []
    name = base = ""
    for number, line in _logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            if base:
                stages.append(Stage(name, base, tuple(current)))
            words = args.split()
            words = [w for w in words if not w.startswith("--")]
            base = words[0]
            name = words[2].lower() if len(words) == 3 and words[1].upper() == "AS" else ""
            current = []
        elif base:
            current.append(Instruction(keyword, args.strip(), number))
    assert base, "no FROM in the Dockerfile"
    stages.append(Stage(name, base, tuple(current)))
    return stages


DOCKERFILE = parse_dockerfile((ROOT / "Dockerfile").read_text())
STAGES = {stage.name: stage for stage in DOCKERFILE if stage.name}


def chain(target: str) -> list[Stage]:
    """The stages an image of ``target`` is made of, from its first base to itself."""
    assert target in STAGES, f"no stage {target} in the Dockerfile"
    stages = [STAGES[target]]
    while stages[0].base.lower() in STAGES:
        stages.insert(0, STAGES[stages[0].base.lower()])
    return stages


def instructions(target: str, keyword: str | None = None) -> list[Instruction]:
    return [
        i for stage in chain(target) for i in stage.instructions if keyword in (None, i.keyword)
    ]


def last(target: str, keyword: str) -> Instruction:
    found = instructions(target, keyword)
    assert found, f"target {target} has no {keyword}"
    return found[-1]


def pip_installs(target: str) -> list[tuple[Instruction, list[str]]]:
    """Each ``pip install`` run in the target: the instruction and pip's arguments."""
    found = []
    for run in instructions(target, "RUN"):
        for command in re.split(r"&&|;|\|\|", run.text()):
            words = shlex.split(command)
            for n in range(len(words) - 1):
                if words[n].endswith("pip") and words[n + 1] == "install":
                    found.append((run, words[n + 2 :]))
    return found


def builder() -> Stage:
    """The one stage that builds the wheel."""
    builds = [
        stage
        for stage in DOCKERFILE
        if any(
            re.search(r"\bpip\s+wheel\b|\bpython\s+-m\s+build\b", run.args)
            for run in stage.all("RUN")
        )
    ]
    assert len(builds) == 1, f"expected one stage that builds the wheel, got {len(builds)}"
    return builds[0]


def context_sources(stage: Stage) -> list[str]:
    """What the stage's COPY and ADD instructions take from the build context."""
    sources: list[str] = []
    for copy in stage.all("COPY") + stage.all("ADD"):
        if "from" not in copy.flags():
            sources.extend(copy.words()[:-1])
    return sources


@pytest.mark.parametrize("target", [DEFAULT_TARGET, SPARK_TARGET])
def test_each_image_installs_the_built_wheel_and_no_source_tree(target: str) -> None:
    build = builder()
    stages = chain(target)
    assert build not in stages, f"target {target} is built on the stage that holds the source"
    installs = pip_installs(target)
    assert installs, f"target {target} installs nothing with pip"
    for run, args in installs:
        options = [a for a in args if a.startswith("-")]
        assert not {"-e", "--editable", "-r", "--requirement"} & set(options), (
            f"line {run.line}: pip install {' '.join(args)}: not an editable or source install"
        )
        requirements = [a for a in args if not a.startswith("-")]
        assert requirements, f"line {run.line}: pip install names nothing"
        for requirement in requirements:
            assert re.search(r"\.whl\)?(\[[\w,-]+\])?$", requirement), (
                f"line {run.line}: pip install {requirement}: only the built wheel"
            )
        mount = run.flags().get("mount", "")
        copied = any(
            c.flags().get("from", "").lower() == build.name
            for stage in stages
            for c in stage.all("COPY")
        )
        assert f"from={build.name}" in mount or copied, (
            f"line {run.line}: the wheel does not come from stage {build.name}"
        )
    for stage in stages:
        for source in context_sources(stage):
            assert re.fullmatch(r"jobs/\w+\.py", source), (
                f"stage {stage.name or stage.base} copies {source} from the build context: "
                "the images get the package only from the wheel (and the jobs' entry points)"
            )


def test_the_default_image_has_neither_java_nor_spark() -> None:
    assert DOCKERFILE[-1].name == DEFAULT_TARGET, (
        f"the last stage (what `docker build .` builds) must be {DEFAULT_TARGET}"
    )
    for instruction in instructions(DEFAULT_TARGET):
        assert not JAVA_OR_SPARK.search(instruction.args), (
            f"line {instruction.line}: {instruction.keyword} {instruction.args[:80]}"
        )


def test_the_spark_image_has_java_17_the_spark_extra_and_the_jobs() -> None:
    runs = " ".join(run.args for run in instructions(SPARK_TARGET, "RUN"))
    assert re.search(r"openjdk-17-(jre|jdk)", runs), "no Java 17 in the Spark image"
    assert any(
        any(a.endswith("[spark]") for a in args) for _, args in pip_installs(SPARK_TARGET)
    ), "the Spark image does not install the wheel's [spark] extra"
    assert last(SPARK_TARGET, "ENTRYPOINT").words() == ["spark-submit"]
    jobs = image_jobs()
    assert {Path(j).name for j in jobs} == {p.name for p in (ROOT / "jobs").glob("*.py")}
    assert last(SPARK_TARGET, "CMD").words()[0] in jobs


def image_jobs() -> set[str]:
    """The paths of the jobs' entry points inside the Spark image."""
    found = set()
    for copy in instructions(SPARK_TARGET, "COPY"):
        *sources, destination = copy.words()
        for source in sources:
            if source.startswith("jobs/"):
                assert destination.endswith("/"), f"line {copy.line}: copy into a directory"
                found.add(destination + Path(source).name)
    return found


@pytest.mark.parametrize("target", [DEFAULT_TARGET, SPARK_TARGET])
def test_each_image_runs_as_an_unprivileged_user(target: str) -> None:
    everything = instructions(target)
    user = last(target, "USER")
    assert user.args.split(":")[0] not in ("root", "0"), f"target {target} runs as root"
    runs_after = [i for i in everything if i.keyword == "RUN" and i.line > user.line]
    assert not runs_after, f"target {target}: RUN after USER (line {runs_after[0].line})"
    name = re.escape(user.args.split(":")[0])
    created = [run.args for run in instructions(target, "RUN")]
    assert any(re.search(rf"\buseradd\b[^&;]*\s{name}(\s|$)", run) for run in created), (
        f"target {target}: no useradd of {user.args}"
    )


def test_the_relay_image_asks_healthz_on_its_metrics_port() -> None:
    check = last(DEFAULT_TARGET, "HEALTHCHECK")
    assert "/healthz" in check.args and "RELAY_METRICS_PORT" in check.args
    port = image_env(DEFAULT_TARGET).get("RELAY_METRICS_PORT")
    assert port, "the image sets no RELAY_METRICS_PORT for its health check"
    assert port in last(DEFAULT_TARGET, "EXPOSE").args.split()
    spark_check = instructions(SPARK_TARGET, "HEALTHCHECK")
    assert not spark_check or spark_check[-1].args == "NONE", "a Spark job serves nothing"


def image_env(target: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in instructions(target, "ENV"):
        for word in shlex.split(instruction.args):
            name, _, value = word.partition("=")
            env[name] = value
    return env


# --- the build context ------------------------------------------------------------------


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match, plus ``**``) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(is an exception, pattern) per line of .dockerignore, in order."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip().removeprefix("./").strip("/")
        rules.append((negated, _ignore_regex(pattern)))
    return rules


def in_context(path: str) -> bool:
    """Whether ``path`` (relative to the checkout) reaches the build context: the last
    rule that matches it or one of its parent directories decides, as Docker does."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    kept = True
    for negated, regex in _ignore_rules():
        if any(regex.fullmatch(c) for c in candidates):
            kept = negated
    return kept


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    sources = [s for stage in DOCKERFILE for s in context_sources(stage)]
    assert sources
    for source in sources:
        path = ROOT / source
        assert path.exists(), f"the Dockerfile copies {source}, which does not exist"
        files = [path] if path.is_file() else [p for p in path.rglob("*.py")]
        for file in files:
            if "__pycache__" not in file.parts:
                relative = file.relative_to(ROOT).as_posix()
                assert in_context(relative), f".dockerignore keeps {relative} out"
    # ... and the wheel stage copies what pyproject.toml builds the wheel from.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    needed = {"pyproject.toml", project["project"]["readme"], *setuptools["package-dir"].values()}
    needed |= {name.split(".")[0] for name in setuptools["packages"]}
    assert needed <= set(context_sources(builder())), "the wheel stage misses build inputs"


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD",
        ".venv/pyvenv.cfg",
        ".relay-dev/env",
        ".mypy_cache/x.json",
        ".pytest_cache/v/cache/lastfailed",
        ".ruff_cache/CACHEDIR.TAG",
        "relay/__pycache__/errors.cpython-311.pyc",
        "outbox_relay.egg-info/PKG-INFO",
        "tests/conftest.py",
        "bench/results/latest.json",
        "docs/operations.md",
        ".env",
    ],
)
def test_the_build_context_leaves_out_what_the_images_must_not_hold(path: str) -> None:
    assert not in_context(path), f"{path} would be sent to the Docker build"


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
    load_mirror_settings(load_settings(environ=environ), environ=environ)
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
