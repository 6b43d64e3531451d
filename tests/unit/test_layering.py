"""Only the adapter, the composition root and the CLI may touch psycopg (ADR 8).

Two checks: a static scan of every module's imports, and a fresh interpreter
that builds an App without using its backend, which must load no driver.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "venturi"
ALLOWED = {"app.py", "cli/services.py"}
FORBIDDEN = ("psycopg", "psycopg_pool", "venturi.postgres")
URL = "postgresql://postgres@127.0.0.1:1/none"  # never connected to: nothing is used


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def adapter_imports(path: Path) -> set[str]:
    return {
        m for m in imported_modules(path) if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)
    }


def test_product_and_runtime_layers_never_import_the_adapter() -> None:
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "postgres" or str(relative) in ALLOWED:
            continue
        bad = adapter_imports(path)
        if bad:
            offenders[str(relative)] = sorted(bad)
    assert offenders == {}


def test_the_scan_sees_the_adapter_imports(tmp_path: Path) -> None:
    """Guards the check itself: it flags a product module importing psycopg."""
    assert "psycopg" in adapter_imports(PACKAGE / "postgres" / "backend.py")
    product = tmp_path / "product.py"
    product.write_text("import psycopg.rows\nfrom venturi.postgres import PostgresBackend\n")
    assert adapter_imports(product) == {"psycopg.rows", "venturi.postgres"}


def loaded_after(statements: str) -> set[str]:
    """The driver and adapter modules a fresh interpreter holds after ``statements``."""
    probe = (
        "import sys\n"
        f"{statements}\n"
        "print(*sorted(m for m in sys.modules if m.startswith(('psycopg', 'venturi.postgres'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(done.stdout.split())


def test_an_app_whose_backend_is_not_used_loads_no_driver() -> None:
    loaded = loaded_after(
        f"import venturi\napp = venturi.App({URL!r}, prefix='q1', set_as_current=False)"
    )
    assert loaded == set()


def test_using_the_backend_loads_the_adapter_and_its_driver() -> None:
    loaded = loaded_after(
        f"import venturi\napp = venturi.App({URL!r}, prefix='q1', set_as_current=False)\n"
        "app.backend\n"
        "app.close()"
    )
    assert {"psycopg", "psycopg_pool", "venturi.postgres.backend"} <= loaded
