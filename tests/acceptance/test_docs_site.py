"""The documentation site builds with ``mkdocs build --strict``, and its references are whole.

One build per module, into a temporary directory: any warning (a broken link, a
docstring mkdocstrings cannot render, a page missing from the navigation) fails
it. The built site's API page lists the public surface, its CLI page every
command of ``build_parser()``, and its navigation every ADR. Marked slow (the
build takes about ten seconds); .ci/run also runs the strict build as a step of
its own, before the tests.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import venturi
import venturi.errors
from venturi.cli import build_parser

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: A hang guard for the build, not a speed assertion.
BUILD_TIMEOUT = 300


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return target


def ids_of(page: Path) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', page.read_text()))


def commands(parser: argparse.ArgumentParser, words: str = "venturi") -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{words} {name}"
                yield from commands(sub, f"{words} {name}")


def test_the_api_page_lists_the_public_surface(site: Path) -> None:
    ids = ids_of(site / "reference" / "venturi" / "index.html")
    for name in venturi.__all__:
        if name != "task":  # venturi.task is also a module: its decorator is venturi.task.task
            assert f"venturi.{name}" in ids, name
    assert "venturi.task.task" in ids
    assert {"venturi.App", "venturi.Context", "venturi.JobRef", "venturi.JobFailed"} <= ids


def test_the_errors_page_lists_every_error(site: Path) -> None:
    ids = ids_of(site / "reference" / "errors" / "index.html")
    assert {f"venturi.errors.{name}" for name in venturi.errors.__all__} <= ids


def test_the_cli_page_lists_every_command(site: Path) -> None:
    page = site / "reference" / "cli" / "index.html"
    ids = ids_of(page)
    found = list(commands(build_parser()))
    assert "venturi jobs list" in found
    for command in found:
        assert command.replace(" ", "-") in ids, command
    assert "--metrics-port" in page.read_text()  # a flag, from the parser's own help


def test_the_benchmarks_and_the_adrs_are_published(site: Path) -> None:
    bench = (site / "benchmarks" / "index.html").read_text()
    assert "venturi benchmarks" in bench
    assert (site / "benchmarks" / "JOURNAL" / "index.html").exists()
    home = (site / "index.html").read_text()
    for adr in sorted((ROOT / "docs" / "adr").glob("0*.md")):
        assert f"adr/{adr.stem}/" in home, adr.name
