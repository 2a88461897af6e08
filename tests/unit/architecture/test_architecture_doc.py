"""docs/architecture.md stays true to the code: its diagram draws the layers of the
``layers`` contract in pyproject.toml (what ``lint-imports`` checks), its table has a row
for each package of ``relay`` that names every module in it, and the CLI's row and box name
every subcommand. A new module, package or subcommand fails here until the doc has it.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

import pytest

import relay
from relay.cli import SUBCOMMANDS, build_parser

PACKAGE = Path(relay.__file__).parent
ROOT = PACKAGE.parent
DOC = ROOT / "docs" / "architecture.md"
LAYER_LINE = re.compile(r"^ ?(relay\.\w+(?: \| relay\.\w+)*)(?:\s{2,}|$)")
TABLE_ROW = re.compile(r"^\| `(relay\.\w+)` \| (.*) \| (.*) \|$")


def _diagram() -> list[str]:
    """The first code block of the doc: the layers, top to bottom, with their notes."""
    text = DOC.read_text()
    start = text.index("```\n") + len("```\n")
    return text[start : text.index("```", start)].splitlines()


def _diagram_layers() -> list[tuple[int, list[str]]]:
    """Each layer line of the diagram: its index, and its packages."""
    found = []
    for index, line in enumerate(_diagram()):
        match = LAYER_LINE.match(line)
        if match:
            found.append((index, match.group(1).split(" | ")))
    return found


def _table() -> dict[str, str]:
    """Package -> what the table says it holds."""
    rows = (TABLE_ROW.match(line) for line in DOC.read_text().splitlines())
    return {row.group(1): row.group(2) for row in rows if row}


def _top_level() -> list[str]:
    """relay's packages and modules, as ``relay.<name>``."""
    names = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    names += [p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    return sorted(f"relay.{name}" for name in names)


def _inner(top: str) -> list[str]:
    """The names of a package's modules and subpackages, at any depth."""
    path = PACKAGE / top.removeprefix("relay.")
    if not path.is_dir():
        return []
    modules = [p.stem for p in path.rglob("*.py") if p.stem not in ("__init__", "__main__")]
    packages = [p.parent.name for p in path.rglob("*/__init__.py")]
    return sorted({*modules, *packages})


def _subcommands() -> list[str]:
    (commands,) = (
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    return sorted(commands.choices)


def _named(name: str, text: str) -> bool:
    """``name`` appears in ``text`` as a word of its own (``dead-letters`` too)."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def test_the_diagram_draws_the_layers_of_the_import_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = (c["layers"] for c in contracts if c["type"] == "layers")
    assert [packages for _, packages in _diagram_layers()] == [
        layer.split(" | ") for layer in layers
    ]


def test_the_table_has_a_row_for_each_package_and_no_other() -> None:
    assert sorted(_table()) == _top_level()


@pytest.mark.parametrize("top", _top_level())
def test_the_row_of_a_package_names_each_of_its_modules(top: str) -> None:
    holds = _table().get(top, "")
    unnamed = [name for name in _inner(top) if f"`{name}`" not in holds]
    assert unnamed == [], f"docs/architecture.md: the row of {top} does not name {unnamed}"


@pytest.mark.parametrize("top", [t for t in _top_level() if (PACKAGE / t[6:]).is_dir()])
def test_the_row_of_a_package_names_no_module_it_does_not_have(top: str) -> None:
    """Outside parentheses (which hold classes, functions, commands), a lower-case name in
    backquotes is a module of the package."""
    outside = re.sub(r"\([^()]*\)", "", _table().get(top, ""))
    named = re.findall(r"`([a-z_][a-z0-9_]*)`", outside)
    gone = [name for name in named if name not in _inner(top)]
    assert gone == [], f"docs/architecture.md: the row of {top} names {gone}, not modules"


def test_the_cli_row_and_box_name_every_subcommand() -> None:
    names = _subcommands()
    assert len(names) >= len(SUBCOMMANDS)
    layers = _diagram_layers()
    start = next(index for index, packages in layers if packages == ["relay.cli"])
    end = next(index for index, _ in layers if index > start)
    box = "\n".join(_diagram()[start:end])
    cli_row = " ".join(re.findall(r"`([^`]*)`", _table()["relay.cli"]))
    assert [name for name in names if not _named(name, box)] == []
    assert [name for name in names if not _named(name, cli_row)] == []


def test_the_checks_see_a_module_missing_from_the_doc() -> None:
    assert "outbox_writer" in _inner("relay.postgres")
    assert "metrics" in _inner("relay.runtime")  # a subpackage, and its modules
    assert "server" in _inner("relay.runtime")
    assert not _named("dead-letters", "dead_letters") and _named("db", "run, db,")
