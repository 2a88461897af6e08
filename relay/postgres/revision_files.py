"""Our migrations' revision ids and head, read from the files without Alembic.

Every command checks the database's schema revision at start-up
(:func:`relay.postgres.migrations.check_schema`); importing Alembic for it (and Mako and
Pygments behind it) cost a fifth of a second of every start. The migrations are one line
of history, each file declaring ``revision`` and ``down_revision`` on a line of its own:
reading those lines gives the same ids and head as Alembic's script directory (a unit
test compares them). Anything else (a branch, an unusual file) returns None: Alembic
decides then.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

_REVISION = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*[\"']([^\"']+)[\"']\s*$", re.M)
_DOWN = re.compile(r"^down_revision(?:\s*:[^=]*)?=\s*(?:None|[\"']([^\"']+)[\"'])\s*$", re.M)


def read_revisions(versions: Path) -> tuple[set[str], str] | None:
    """(every revision, the head) of the migrations in ``versions``, read from their
    files' ``revision`` and ``down_revision`` lines; None when the files are not one
    plain line of history written that way (then ask Alembic)."""
    parents: dict[str, str | None] = {}
    for path in sorted(versions.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        revision, down = _REVISION.findall(source), _DOWN.findall(source)
        if len(revision) != 1 or len(down) != 1 or revision[0] in parents:
            return None
        parents[revision[0]] = down[0] or None
    heads = set(parents) - set(parents.values())
    roots = [r for r, down in parents.items() if down is None]
    if len(heads) != 1 or len(roots) != 1 or not set(parents.values()) - {None} <= set(parents):
        return None
    return set(parents), heads.pop()


def load_sibling(here: str, filename: str) -> ModuleType:
    """The migration ``filename`` beside the migration file ``here`` (its ``__file__``),
    loaded as a module: a migration that changes an earlier one's SQL reads that SQL
    (and its downgrade restores it) from there."""
    path = Path(here).with_name(filename)
    spec = importlib.util.spec_from_file_location(f"relay_migration_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load the migration {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
