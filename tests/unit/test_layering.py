"""Only the adapter, the composition root and the CLI may touch psycopg (ADR 8)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "venturi"
ALLOWED = {"app.py", "cli.py"}
FORBIDDEN = ("psycopg", "psycopg_pool", "venturi.postgres")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_product_and_runtime_layers_never_import_the_adapter() -> None:
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "postgres" or str(relative) in ALLOWED:
            continue
        bad = {
            m
            for m in imported_modules(path)
            if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)
        }
        if bad:
            offenders[str(relative)] = sorted(bad)
    assert offenders == {}


def test_the_scan_sees_the_adapter_imports() -> None:
    """Guards the check itself: the adapter does import psycopg."""
    assert "psycopg" in imported_modules(PACKAGE / "postgres" / "backend.py")
