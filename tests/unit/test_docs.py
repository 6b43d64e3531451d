"""Prose that must stay true of the tree: the ADR index, the error tree, the bench's links.

Each check reads files and modules only (no database). A new ADR missing from
the index, an exception class missing from ``errors.py``'s drawn tree, or a
relative link from the ADRs or the bench's documents to a file that is not
there fails here.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from venturi import errors

ROOT = Path(__file__).resolve().parents[2]
ADR_DIR = ROOT / "docs" / "adr"
INDEX = ADR_DIR / "README.md"
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _adr_files() -> list[str]:
    return sorted(p.name for p in ADR_DIR.glob("[0-9][0-9][0-9][0-9]-*.md"))


def _links(path: Path) -> list[str]:
    return [target for target in _LINK.findall(path.read_text()) if "://" not in target]


def test_every_adr_file_is_in_the_index() -> None:
    linked = set(_links(INDEX))
    missing = [name for name in _adr_files() if name not in linked]
    assert missing == [], f"ADRs missing from docs/adr/README.md: {missing}"


def test_the_index_links_only_to_adr_files_that_exist() -> None:
    dangling = [target for target in _links(INDEX) if not (ADR_DIR / target).is_file()]
    assert dangling == []


def test_the_index_lists_each_adr_once_in_number_order() -> None:
    numbers = [int(n) for n in re.findall(r"^\| \[(\d+)\]\(", INDEX.read_text(), re.M)]
    assert len(numbers) == len(set(numbers))
    spec, venturi = [n for n in numbers if n < 100], [n for n in numbers if n >= 100]
    assert spec == sorted(spec)
    assert venturi == sorted(venturi)


@pytest.mark.parametrize(
    "document",
    [*sorted(ADR_DIR.glob("*.md")), ROOT / "bench" / "README.md", ROOT / "bench" / "JOURNAL.md"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_point_at_files_that_exist(document: Path) -> None:
    dangling = [
        target for target in _links(document) if not (document.parent / target).exists()
    ]
    assert dangling == []


def test_the_error_tree_names_every_exception_class() -> None:
    tree = (errors.__doc__ or "").split("The tree::", 1)[1]
    drawn = {"VenturiError", *re.findall(r"[├└]── (\w+)", tree)}
    classes = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and issubclass(value, errors.VenturiError)
        and value.__module__ == errors.__name__
    }
    assert classes - drawn == set(), "add these to the tree in venturi/errors.py's docstring"
    assert drawn - classes == set(), "the tree names classes errors.py does not define"


def test_the_error_tree_draws_each_class_under_its_base() -> None:
    tree = (errors.__doc__ or "").split("The tree::", 1)[1].split("\n\n", 2)[1]
    parents: list[str] = []
    for line in tree.splitlines():
        match = re.match(r"^(\s*)((?:[│ ]   )*)[├└]── (\w+)", line)
        if match is None:
            if line.strip() == "VenturiError":
                parents = ["VenturiError"]
            continue
        depth = len(match.group(2)) // 4 + 1
        name = match.group(3)
        parents = [*parents[:depth], name]
        base = getattr(errors, parents[-2])
        assert issubclass(getattr(errors, name), base), f"{name} is drawn under {parents[-2]}"
