"""One engine factory and one way to read settings: no module builds an engine of its own
or reads a ``RELAY_*`` variable itself (docs/architecture.md, "Where a new thing goes").

The chaos harness and the dev environment are exempt on purpose: the chaos checker is an
independent observer of the adapters, and the dev environment sets variables up.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXEMPT = ("relay/chaos/", "relay/devenv/")


def _sources() -> list[Path]:
    found = [*sorted((ROOT / "relay").rglob("*.py")), ROOT / "migrations" / "env.py"]
    return [p for p in found if not str(p.relative_to(ROOT)).startswith(EXEMPT)]


def test_only_the_engine_factory_creates_engines() -> None:
    creating = [
        str(p.relative_to(ROOT))
        for p in _sources()
        if "create_engine(" in p.read_text(encoding="utf-8")
    ]
    assert creating == ["relay/postgres/engine.py"]


def test_migrations_take_their_engine_from_the_factory() -> None:
    env = (ROOT / "migrations" / "env.py").read_text(encoding="utf-8")
    assert "from relay.postgres.engine import opened" in env
    assert "os.environ" not in env


def test_only_the_settings_read_relay_variables() -> None:
    reading = re.compile(r"(environ(\.get)?[\[(]|getenv\()\s*[\"']RELAY_")
    found = [
        str(p.relative_to(ROOT))
        for p in _sources()
        if reading.search(p.read_text(encoding="utf-8"))
    ]
    assert found == []
