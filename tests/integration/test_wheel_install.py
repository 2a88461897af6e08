"""The wheel, installed into a fresh virtualenv, works without the checkout: `relay db
upgrade` migrates a fresh database from the migrations inside the package, `relay run
--once` publishes, `relay mirror --once` applies the topic to a table.

The virtualenv gets the wheel alone (``--no-deps``, no index) and finds the dependencies
through a ``.pth`` file naming the test interpreter's site-packages (which has no
``relay`` of its own there: the checkout's editable install hooks in only from a ``.pth``
file of that directory, and a directory a ``.pth`` file names is not scanned for more).
Every command runs from a temporary directory, so the checkout is never on ``sys.path``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
import venv
import zipfile
from collections.abc import Callable
from pathlib import Path

import relay
from tests.integration.mirror_support import ITEMS_DDL, MirrorEnv, items_mapping, run_script
from tests.integration.support import (
    PROJECT_ROOT,
    RelayTestEnv,
    new_prefix,
    read_committed,
    run_sql,
)
from tests.integration.writes import publish_events

# What the build reads: pyproject.toml and what it names (copied, so that the build's
# build/ and *.egg-info stay out of the working tree).
BUILD_INPUTS = ("pyproject.toml", "README.md", "MANIFEST.in", "alembic.ini", "relay", "migrations")
ITEMS = 40
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=180
    )
    assert result.returncode == 0, f"{argv[:4]} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


def _build_wheel(work: Path) -> Path:
    source = work / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (PROJECT_ROOT / name).is_dir():
            shutil.copytree(
                PROJECT_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(PROJECT_ROOT / name, source / name)
    _run([*PIP, "wheel", "--no-deps", "--wheel-dir", str(work / "dist"), str(source)], work)
    (wheel,) = (work / "dist").glob("outbox_relay-*.whl")
    return wheel


def _install(wheel: Path, work: Path) -> Path:
    """A fresh virtualenv with the wheel; returns its bin directory."""
    target = work / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    site = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work
    )
    (Path(site.strip()) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([*PIP, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], work)
    return target / "bin"


def _source_packages() -> set[str]:
    return {
        ".".join(init.parent.relative_to(PROJECT_ROOT).parts)
        for init in (PROJECT_ROOT / "relay").rglob("__init__.py")
    }


def _outside_checkout(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def test_the_installed_wheel_migrates_publishes_and_mirrors(
    make_database: Callable[[], str],
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    in_wheel = {os.path.dirname(n).replace("/", ".") for n in names if n.endswith(".py")}
    assert _source_packages() <= in_wheel, "packages missing from pyproject.toml's list"
    assert "relay/py.typed" in names, "type checkers would ignore the installed package"
    for migration in (PROJECT_ROOT / "migrations" / "versions").glob("*.py"):
        assert f"relay/postgres/_migrations/versions/{migration.name}" in names
    bin_dir = _install(wheel, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    where = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "import relay, relay.spark.mirror, relay.spark.outbox_relay, relay.spark.replicate\n"
            "from relay.postgres.migrations import script_location\n"
            "print(relay.__file__); print(script_location())",
        ],
        elsewhere,
        _outside_checkout(dict(os.environ)),
    ).split()
    assert all(Path(path).is_relative_to(bin_dir.parent) for path in where), where

    database_url = make_database()
    topic = make_topic("wheel", partitions=2)
    relay_env = RelayTestEnv(database_url, bootstrap_servers, new_prefix())
    cli = str(bin_dir / "relay")
    _run([cli, "db", "upgrade"], elsewhere, _outside_checkout(relay_env.env()))
    assert run_sql(database_url, "SELECT count(*) FROM relay_alembic_version") == [(1,)]

    run_script(database_url, ITEMS_DDL)
    values = {n: {"name": f"item-{n}", "qty": n} for n in range(ITEMS)}
    published = publish_events(
        database_url, [relay.Event(topic, str(n), value) for n, value in values.items()]
    )
    _run([cli, "run", "--once"], elsewhere, _outside_checkout(relay_env.env()))
    records = read_committed(bootstrap_servers, topic)
    assert sorted(r.outbox_id for r in records) == sorted(published)

    mapping = tmp_path / "mirror.toml"
    mapping.write_text(items_mapping([topic]))
    mirror = MirrorEnv(database_url, bootstrap_servers, mapping, f"wheel-{uuid.uuid4().hex[:8]}")
    _run([cli, "mirror", "--once"], elsewhere, _outside_checkout(mirror.env()))
    mirrored = run_sql(database_url, "SELECT id, name, qty FROM items ORDER BY id")
    assert mirrored == [(n, v["name"], v["qty"]) for n, v in values.items()]
