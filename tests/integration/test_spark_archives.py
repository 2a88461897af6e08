"""The Spark job with its Python environment shipped as a packed virtualenv
(`spark-submit --archives env.tar.gz#environment`), as docs/deployment.md describes it.

The environment is the wheel and its dependencies in a fresh virtualenv, packed with
venv-pack; it holds no PySpark, which spark-submit puts on the driver's and the workers'
path itself. The virtualenv is deleted once packed: only the archive is left.

- local mode (``local[2]``): the tasks run in the driver's JVM and start their Python
  workers in the driver's working directory, not where Spark unpacks ``--archives``; so
  the archive is unpacked there as ``environment/``, and the driver and the workers both
  run ``./environment/bin/python``;
- executors of their own (``local-cluster``, the way a cluster runs them): each executor
  gets ``./environment`` from ``--archives`` alone, and the driver runs a copy of the
  archive unpacked elsewhere.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import tarfile
import venv
from pathlib import Path

import pyspark
import pytest
import venv_pack

from tests.integration.support import (
    PROJECT_ROOT,
    RelayTestEnv,
    assert_exactly_once_in_order,
    read_committed,
)
from tests.integration.test_wheel_install import PIP, _build_wheel, _outside_checkout, _run
from tests.integration.writes import write_events
from tests.workers import built_once

SPARK_HOME = Path(pyspark.__file__).parent
JOB = PROJECT_ROOT / "jobs" / "outbox_relay.py"
ROWS = 400


def _constraints(path: Path) -> Path:
    """The versions of this interpreter's distributions, so that the packed environment
    runs the dependencies the tests run (and pip finds them in its cache)."""
    pins = sorted(
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in importlib.metadata.distributions()
        if dist.metadata["Name"] and dist.metadata["Name"].lower() != "outbox-relay"
    )
    path.write_text("\n".join(pins) + "\n")
    return path


@pytest.fixture(scope="session")
def packed_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """env.tar.gz: the wheel and its dependencies in a virtualenv packed with venv-pack
    (built once a run, whichever worker asks first)."""
    return built_once(tmp_path_factory, "packed-env", _pack)


def _pack(work: Path) -> Path:
    wheel = _build_wheel(work)
    target = work / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(target)
    constraints = _constraints(work / "constraints.txt")
    python = str(target / "bin" / "python")
    _run([*PIP, "--python", python, "install", "-c", str(constraints), str(wheel)], work)
    archive = work / "env.tar.gz"
    venv_pack.pack(prefix=str(target), output=str(archive))
    shutil.rmtree(target)
    return archive


def _unpack(archive: Path, into: Path) -> Path:
    """The archive unpacked into ``into``; returns its python."""
    into.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="tar")
    return into / "bin" / "python"


def _spark_home(into: Path) -> Path:
    """A Spark home of links to the installed PySpark's: a local cluster's workers keep
    their executors' working directories in ``<SPARK_HOME>/work``, which stays here."""
    into.mkdir()
    for entry in SPARK_HOME.iterdir():
        (into / entry.name).symlink_to(entry)
    return into


def _spark_submit(
    relay_env: RelayTestEnv,
    cwd: Path,
    master: str,
    archive: Path,
    driver_python: str,
    spark_home: Path = SPARK_HOME,
) -> subprocess.CompletedProcess[str]:
    """The outbox job through spark-submit, the workers' Python from the archive."""
    env = _outside_checkout(
        relay_env.env(
            # spark-submit asks PYSPARK_DRIVER_PYTHON where PySpark is; it has none.
            SPARK_HOME=str(spark_home),
            PYSPARK_PYTHON="./environment/bin/python",
            PYSPARK_DRIVER_PYTHON=driver_python,
        )
    )
    submit = [str(spark_home / "bin" / "spark-submit"), "--master", master]
    # No --master for the job itself: spark-submit's applies.
    return subprocess.run(
        [*submit, "--archives", f"{archive}#environment", str(JOB)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _failure(result: subprocess.CompletedProcess[str]) -> str:
    """The end of spark-submit's stderr without Spark's INFO lines and stack frames."""
    lines = [
        line
        for line in result.stderr.splitlines()
        if " INFO " not in line and not line.lstrip().startswith("at ")
    ]
    return f"spark-submit exited {result.returncode}:\n" + "\n".join(lines[-25:])


def _where_relay_is(python: Path, cwd: Path) -> Path:
    out = _run(
        [str(python), "-c", "import relay; print(relay.__file__)"],
        cwd,
        _outside_checkout(dict(os.environ)),
    )
    return Path(out.strip())


@pytest.mark.long(20)  # its first user builds the packed environment
def test_local_mode_runs_the_job_on_the_unpacked_archive(
    relay_env: RelayTestEnv, topic: str, packed_env: Path, tmp_path: Path
) -> None:
    committed = write_events(relay_env.database_url, topic, ROWS)
    python = _unpack(packed_env, tmp_path / "environment")
    assert _where_relay_is(python, tmp_path).is_relative_to(tmp_path / "environment")

    result = _spark_submit(relay_env, tmp_path, "local[2]", packed_env, "./environment/bin/python")

    assert result.returncode == 0, _failure(result)
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]


@pytest.mark.long(30)
def test_executors_get_the_environment_from_archives(
    relay_env: RelayTestEnv, topic: str, packed_env: Path, tmp_path: Path
) -> None:
    committed = write_events(relay_env.database_url, topic, ROWS)
    driver_python = _unpack(packed_env, tmp_path / "driver-env")
    spark_home = _spark_home(tmp_path / "spark-home")
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    # Nothing named environment where the driver runs: the executors have only --archives.
    result = _spark_submit(
        relay_env,
        submit_dir,
        "local-cluster[2,1,1024]",
        packed_env,
        str(driver_python),
        spark_home,
    )

    assert result.returncode == 0, _failure(result)
    unpacked = sorted(spark_home.glob("work/app-*/*/environment/bin/python"))
    assert unpacked, "no executor had the archive in its working directory"
    assert_exactly_once_in_order(read_committed(relay_env.bootstrap_servers, topic), committed)
    assert relay_env.sql("SELECT count(*) FROM outbox") == [(0,)]
