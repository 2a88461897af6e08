"""The package's plan (docs/architecture.md) holds: no import cycle anywhere in ``relay``.

The layer contracts in pyproject.toml (``lint-imports`` in CI) forbid upward imports
between packages; this test also catches cycles inside one package, including imports
deferred into functions.
"""

from __future__ import annotations

import grimp


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """One example cycle per strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("relay", exclude_type_checking_imports=True)


def test_the_package_has_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = _graph()
    graph.add_import(importer="relay.errors", imported="relay.cli")
    found = _cycles(graph)
    assert any("relay.errors" in group and "relay.cli" in group for group in found)
