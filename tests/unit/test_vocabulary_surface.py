"""The vocabulary modules declare their public names, and the package uses only those.

Each module below declares ``__all__``; every name in it exists, and every
name another module of the package (contrib and dashboard included) imports
from it is declared, unless it starts with ``_`` (an explicitly internal
seam).
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "venturi"
VOCABULARY = (
    "backoff",
    "binding",
    "context",
    "conversion",
    "cron",
    "errors",
    "events",
    "ids",
    "logs",
    "merge",
    "options",
    "schedule",
    "serialization",
)


@functools.cache
def _package_imports() -> tuple[tuple[str, str, str], ...]:
    """(importing file, module, name) for every ``from venturi.<module> import name``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("venturi."):
                where = str(path.relative_to(PACKAGE.parent))
                found += [(where, node.module or "", a.name) for a in node.names]
    return tuple(found)


def _imports_from(module: str) -> list[tuple[str, str]]:
    wanted = f"venturi.{module}"
    return [(where, name) for where, source, name in _package_imports() if source == wanted]


@pytest.mark.parametrize("module", VOCABULARY)
def test_declares_all_and_every_declared_name_exists(module: str) -> None:
    loaded = importlib.import_module(f"venturi.{module}")
    declared = loaded.__dict__.get("__all__")
    assert isinstance(declared, list)
    assert [name for name in declared if not hasattr(loaded, name)] == []
    assert len(declared) == len(set(declared))


@pytest.mark.parametrize("module", VOCABULARY)
def test_the_package_imports_only_declared_names(module: str) -> None:
    declared = set(importlib.import_module(f"venturi.{module}").__all__)
    undeclared = [
        (where, name)
        for where, name in _imports_from(module)
        if name not in declared and not name.startswith("_")
    ]
    assert undeclared == []


@pytest.mark.parametrize("module", VOCABULARY)
def test_every_public_definition_is_declared(module: str) -> None:
    loaded = importlib.import_module(f"venturi.{module}")
    tree = ast.parse(Path(loaded.__file__ or "").read_text())
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    missing = sorted(name for name in defined - set(loaded.__all__) if not name.startswith("_"))
    assert missing == []
