"""Importing a core loads no driver it does not use: ``import relay`` is lazy (PEP 562),
and no module of a core, nor :mod:`relay.testing`, imports a driver even indirectly.

The forbidden contracts in pyproject.toml (``lint-imports``) see direct imports only; this
imports every module of each in a clean interpreter and looks at ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import relay

PACKAGE = Path(relay.__file__).parent
DRIVERS = ("sqlalchemy", "psycopg", "alembic", "confluent_kafka", "pyspark")
DRIVER_FREE = (
    "relay.errors",
    "relay.runtime",
    "relay.settings",
    "relay.publishing",
    "relay.mirroring",
    "relay.replication",
    "relay.testing",
)

# A clean interpreter (-E: no PYTHON* variables) running a -c script.
_PYTHON = (sys.executable, "-E", "-c")
# Imports each module named on the command line in turn; prints, for each that loaded a
# driver, the drivers it was the first to load.
_PROBE = """
import importlib, json, sys
drivers = sys.argv[1].split(",")
loaded = {}
for module in sys.argv[2:]:
    before = {d for d in drivers if d in sys.modules}
    importlib.import_module(module)
    new = sorted(d for d in drivers if d in sys.modules and d not in before)
    if new:
        loaded[module] = new
print(json.dumps(loaded))
"""


def _modules(name: str) -> list[str]:
    """``name`` and, for a package, every module in it."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    if not path.is_dir():
        return [name]
    found = []
    for file in sorted(path.rglob("*.py")):
        parts = file.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _drivers_loaded(modules: list[str]) -> dict[str, list[str]]:
    result = subprocess.run(
        [*_PYTHON, _PROBE, ",".join(DRIVERS), *modules],
        cwd=PACKAGE.parent,  # sys.path[0] is "", the directory of this checkout's relay
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    loaded: dict[str, list[str]] = json.loads(result.stdout)
    return loaded


@pytest.fixture(scope="module")
def loaded_by_the_cores() -> dict[str, list[str]]:
    """One interpreter imports ``relay`` and then every module of every core."""
    return _drivers_loaded(["relay", *(m for core in DRIVER_FREE for m in _modules(core))])


@pytest.mark.parametrize("core", ["relay", *DRIVER_FREE])
def test_importing_a_core_loads_no_driver(
    core: str, loaded_by_the_cores: dict[str, list[str]]
) -> None:
    assert len(_modules(core)) >= 1
    mine = {m: d for m, d in loaded_by_the_cores.items() if m in _modules(core)}
    assert mine == {}


def test_the_root_package_loads_the_writer_only_when_publish_is_used() -> None:
    probe = [
        *_PYTHON,
        "import relay, sys; relay.Event, relay.RelayError, relay.__version__\n"
        "print('sqlalchemy' in sys.modules); relay.publish; print('sqlalchemy' in sys.modules)",
    ]
    result = subprocess.run(
        probe, cwd=PACKAGE.parent, capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == ["False", "True"]


def test_the_probe_sees_a_driver() -> None:
    assert _drivers_loaded(["relay.errors", "relay.postgres.outbox_writer"]) == {
        "relay.postgres.outbox_writer": ["psycopg", "sqlalchemy"]
    }
