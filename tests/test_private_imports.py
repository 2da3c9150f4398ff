"""No module of the package imports a private name from another (issue 22).

A name with a leading underscore is its module's own business; a sibling that
imports it couples itself to an implementation detail no reader is told about.
A name two modules share is public in the module that defines it (in its
``__all__``). ``import x as _x`` of a public name is an alias and allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "memtheory"


def _private_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memtheory"):
                found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.module}.{a.name}"
                          for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_the_scan_reads_the_package() -> None:
    """The walk finds the package's modules (a moved folder would make the test vacuous)."""
    assert len(list(PACKAGE.rglob("*.py"))) > 100


def test_no_module_imports_a_private_name_from_another() -> None:
    """Every ``from memtheory... import name`` names a public name."""
    assert _private_imports() == []
