"""Every module declares its public names, and the package imports only declared ones.

Each module of the package declares ``__all__`` (every name in it exists, none
twice, every public class and function defined there listed). Every
``from venturi.<module> import name`` anywhere in the package names a declared name
or a submodule; a name starting with ``_`` is an explicitly internal seam, which
``contrib/`` and ``dashboard/`` never use: they are built on the declared surface
only, as a user's integration would be.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from import_graph import PACKAGE, Import, module_name, package_imports

MODULES = sorted(
    module_name(path) for path in PACKAGE.rglob("*.py") if path.name != "__main__.py"
)
#: Where only declared names may be imported, private seams included.
INTEGRATIONS = ("venturi.contrib", "venturi.dashboard")


def _declared(module: str) -> set[str]:
    declared = importlib.import_module(module).__dict__.get("__all__")
    assert isinstance(declared, list), f"{module} declares no __all__"
    return set(declared)


def _is_submodule(module: str, name: str) -> bool:
    return f"{module}.{name}" in MODULES


def undeclared_imports(imports: list[Import]) -> list[tuple[str, int, str, str]]:
    """(importing module, line, module, name) for each import of an undeclared name."""
    found = []
    for i in imports:
        if i.target not in MODULES:
            continue
        internal_allowed = not i.source.startswith(INTEGRATIONS)
        for name in i.names:
            if _is_submodule(i.target, name) or name in _declared(i.target):
                continue
            if name.startswith("_") and internal_allowed:
                continue
            found.append((i.source, i.line, i.target, name))
    return found


@pytest.mark.parametrize("module", MODULES)
def test_declares_all_and_every_declared_name_exists(module: str) -> None:
    loaded = importlib.import_module(module)
    declared = loaded.__dict__.get("__all__")
    assert isinstance(declared, list)
    assert [name for name in declared if not hasattr(loaded, name)] == []
    assert len(declared) == len(set(declared))


@pytest.mark.parametrize("module", MODULES)
def test_every_public_definition_is_declared(module: str) -> None:
    loaded = importlib.import_module(module)
    tree = ast.parse(Path(loaded.__file__ or "").read_text())
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    assert sorted(name for name in defined - _declared(module) if not name.startswith("_")) == []


def test_the_package_imports_only_declared_names() -> None:
    assert undeclared_imports(package_imports()) == []


def test_the_check_sees_an_integration_reaching_inside() -> None:
    """Guards the check itself: contrib importing an undeclared or private name."""
    reaching = [
        Import("venturi.contrib.flask", "venturi.runtime.executor", ("_done",), 1),
        Import("venturi.contrib.flask", "venturi.types", ("NotAName",), 2),
        Import("venturi.task", "venturi.runtime.executor", ("_done",), 3),
    ]
    assert undeclared_imports(reaching) == [
        ("venturi.contrib.flask", 1, "venturi.runtime.executor", "_done"),
        ("venturi.contrib.flask", 2, "venturi.types", "NotAName"),
    ]
