"""memtheory's modules import each other without a cycle, counting imports inside functions.

``lint-imports`` (import-linter, configured in pyproject.toml) checks the layers
contract; this test checks what a function-level import could hide from a reader:
a cycle between two memtheory modules. It reads every module's syntax tree, so it
runs nothing of the package. Imports under ``if TYPE_CHECKING:`` are left out (they
never run), and so is every import of a module outside memtheory (torch,
transformers, matplotlib load on use).
"""

from __future__ import annotations

import ast
import graphlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root``, by dotted name (a package by its own)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _import_nodes_of(child))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _import_nodes(node)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    yield from _import_nodes(node)


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that module ``name`` (at ``path``) imports, anywhere in it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        submodules = [f"{base}.{alias.name}" for alias in node.names]
        targets.update(s for s in submodules if s in modules)
        if not all(s in modules for s in submodules):
            targets.add(base)
    return {t for t in targets if t in modules and t != name}


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Each module of ``package`` and the package modules it imports (deferred ones too)."""
    modules = module_names(root, package)
    return {name: imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected set of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            component.append(node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_memtheory_has_no_import_cycle_even_through_function_level_imports():
    """No two memtheory modules import each other, directly or around a loop, anywhere in them."""
    graph = import_graph(ROOT, "memtheory")
    assert "memtheory.layers.core" in graph  # the walk found the package
    assert cycles(graph) == []


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    """A cycle closed by an import inside a function is reported; a TYPE_CHECKING one is not."""
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import f\n",
            "pkg/b.py": "def f():\n    from pkg import a\n    return a\n",
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
            "pkg/d.py": "from .c import x\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.c"] == set()
    assert graph["pkg.d"] == {"pkg.c"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_the_cycle_finder_agrees_with_the_standard_library_on_memtheory():
    """The standard library's topological sort fails exactly when cycles() finds a cycle."""
    graph = import_graph(ROOT, "memtheory")
    graphlib.TopologicalSorter(graph).prepare()  # acyclic as it is
    graph["memtheory.errors"] = graph["memtheory.errors"] | {"memtheory.units"}  # close a loop
    assert any({"memtheory.errors", "memtheory.units"} <= set(c) for c in cycles(graph))
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()


_LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(_LINT_IMPORTS is None, reason="import-linter is not installed")
def test_the_layers_contract_holds():
    """``lint-imports`` keeps the layers contract of pyproject.toml."""
    assert _LINT_IMPORTS is not None
    result = subprocess.run(
        [_LINT_IMPORTS, "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
