"""``venturi --version``: the installed distribution's version, and the changelog beside it."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from cli_support import Run, succeeded

ROOT = Path(__file__).resolve().parents[2]


def test_version_prints_the_installed_distributions_version(venturi_cli: Run) -> None:
    version = importlib.metadata.version("venturi")
    assert succeeded(venturi_cli("--version")) == f"venturi {version}\n"


def test_the_changelog_has_an_unreleased_section_in_keep_a_changelog_form() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "Keep a Changelog" in text
    sections = re.findall(r"^## \[(.+?)\]", text, flags=re.MULTILINE)
    assert sections[0] == "Unreleased"
    assert re.search(r"^### Added$", text, flags=re.MULTILINE)


def test_the_changelog_has_a_dated_section_for_the_packaged_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    version = re.search(r'^version = "(.+)"$', pyproject, flags=re.MULTILINE)
    assert version is not None
    releases = re.findall(r"^## \[(\d[^\]]*)\] - (\d{4}-\d{2}-\d{2})$", text, flags=re.MULTILINE)
    assert releases, "no release section"
    assert releases[0][0] == version[1]
