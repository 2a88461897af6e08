"""The start-up check reads our revisions from the migration files, not through Alembic:
the same ids and head as Alembic's script directory, or None where it cannot tell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.script import ScriptDirectory

from relay.postgres import migrations
from relay.postgres.revision_files import read_revisions


def test_the_files_give_alembics_revisions_and_head() -> None:
    scripts = ScriptDirectory.from_config(migrations.alembic_config())
    found = read_revisions(migrations.script_location() / "versions")
    assert found is not None
    assert found == ({s.revision for s in scripts.walk_revisions()}, scripts.get_current_head())


def _write(versions: Path, name: str, revision: str, down: str | None) -> None:
    shown = "None" if down is None else f'"{down}"'
    (versions / f"{name}.py").write_text(
        f'revision: str = "{revision}"\ndown_revision: str | None = {shown}\n'
    )


def test_what_is_not_one_line_of_history_is_left_to_alembic(tmp_path: Path) -> None:
    _write(tmp_path, "a", "0001", None)
    _write(tmp_path, "b", "0002", "0001")
    assert read_revisions(tmp_path) == ({"0001", "0002"}, "0002")
    _write(tmp_path, "c", "0003", "0001")  # a branch: two heads
    assert read_revisions(tmp_path) is None
    (tmp_path / "c.py").write_text('revision = "0003"\ndown_revision = ("0001", "0002")\n')
    assert read_revisions(tmp_path) is None  # a merge
    (tmp_path / "c.py").unlink()
    _write(tmp_path, "d", "0004", "0009")  # a parent that is not there
    assert read_revisions(tmp_path) is None
    assert read_revisions(tmp_path / "none") is None


def test_the_mirror_command_starts_without_importing_alembic_or_structlog() -> None:
    code = "import sys, relay.cli, relay.commands.mirror; print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = {name.split(".")[0] for name in eval(done.stdout)}
    assert not imported & {"alembic", "mako", "structlog"}  # structlog: --log-format json only
