"""The images: they install the wheel and nothing of the source tree, the image without
Spark has no Java, both run unprivileged, and the build context holds what the Dockerfile
copies and nothing private."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.unit.deployment.model import (
    DEFAULT_TARGET,
    DOCKERFILE,
    JAVA_OR_SPARK,
    ROOT,
    SPARK_TARGET,
    builder,
    chain,
    context_sources,
    image_env,
    image_jobs,
    in_context,
    instructions,
    last,
    pip_installs,
)


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


# --- the build context ------------------------------------------------------------------


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


def test_the_deployment_guide_names_every_job_the_spark_image_holds() -> None:
    """docs/deployment.md's table of images names each entry point the Dockerfile copies."""
    guide = (ROOT / "docs" / "deployment.md").read_text()
    (row,) = [line for line in guide.splitlines() if line.startswith("| `relay-spark` |")]
    missing = sorted(Path(job).name for job in image_jobs() if Path(job).name not in row)
    assert not missing, f"docs/deployment.md's relay-spark row does not name {missing}"
