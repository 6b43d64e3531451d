"""The package's import graph, read with ``ast`` (nothing is imported): for the layering
and declared-surface tests. Every import counts as an arrow, the ones inside functions
and under ``if TYPE_CHECKING:`` included, as in the project's import-graph check."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "venturi"


@dataclass(frozen=True)
class Import:
    """``from target import names`` (``names`` empty for ``import target``) in ``source``."""

    source: str
    target: str
    names: tuple[str, ...]
    line: int


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_in(path: Path, root: Path = PACKAGE) -> Iterator[Import]:
    """Every import statement of the module at ``path``, relative ones resolved."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([target] if target else [])])
            yield Import(name, target, tuple(a.name for a in node.names), node.lineno)


def package_imports(root: Path = PACKAGE) -> list[Import]:
    """The imports of every module of the package at ``root``."""
    return [found for path in sorted(root.rglob("*.py")) for found in imports_in(path, root)]


def graph(imports: list[Import], package: str = "venturi") -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from pkg import submodule`` is an
    arrow to the submodule when one of that name exists)."""
    modules = {i.source for i in imports}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for i in imports:
        if i.target != package and not i.target.startswith(package + "."):
            continue
        targets = {f"{i.target}.{n}" for n in i.names if f"{i.target}.{n}" in modules}
        if len(targets) < len(i.names) or not i.names:
            targets.add(i.target)
        edges[i.source] |= {t for t in targets if t != i.source and t in modules}
    return edges


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)
