"""The layers of the package, as written down in STYLE's layout and ADR 8.

Only the adapter, the composition root and the CLI's embedded-server command may
touch psycopg: a static scan of every module's imports, and a fresh interpreter
that builds an App without using its backend, which must load no driver. Then the
floors of the import graph: no circle (type-only and lazy imports count), the
vocabulary imports nothing above it, and the adapter reaches nothing but the
vocabulary. Declared names are held by ``test_declared_surface.py``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from import_graph import cycles, graph, package_imports

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


# -- the floors of the import graph (STYLE, third-wave layout) ------------------------

#: The vocabulary every layer speaks: values, errors, names, pure functions and the
#: storage interface. It imports nothing above itself.
VOCABULARY = frozenset(
    f"venturi.{name}"
    for name in (
        "argument_types",
        "backend",
        "backoff",
        "context",
        "controls",
        "conversion",
        "cron",
        "cursor",
        "durable",
        "errors",
        "events",
        "ids",
        "job_template",
        "logs",
        "merge",
        "naming",
        "refs",
        "serialization",
        "step_log",
        "types",
    )
)


def in_vocabulary(module: str) -> bool:
    """A vocabulary module, or a part of the storage interface's package."""
    return module in VOCABULARY or module.startswith("venturi.backend.")


def test_no_import_circle_type_only_and_lazy_imports_included() -> None:
    assert cycles(graph(package_imports())) == []


def test_the_circle_check_sees_a_circle(tmp_path: Path) -> None:
    """Guards the check itself: a type-only import that closes a loop is a circle."""
    package = tmp_path / "venturi"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from venturi.b import B\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from venturi.a import A\n"
    )
    assert cycles(graph(package_imports(package))) == [["venturi.a", "venturi.b"]]


def test_the_vocabulary_imports_nothing_above_it() -> None:
    edges = graph(package_imports())
    above = {
        m: sorted(t for t in targets if not in_vocabulary(t))
        for m, targets in edges.items()
        if in_vocabulary(m)
    }
    above = {m: ts for m, ts in above.items() if ts}
    assert above == {}


def test_the_adapter_imports_only_the_vocabulary_never_the_runtime_or_the_product() -> None:
    edges = graph(package_imports())
    reached = {
        module: sorted(t for t in targets if not t.startswith("venturi.postgres"))
        for module, targets in edges.items()
        if module.startswith("venturi.postgres")
    }
    beyond = {m: [t for t in ts if not in_vocabulary(t)] for m, ts in reached.items()}
    assert {m: ts for m, ts in beyond.items() if ts} == {}
