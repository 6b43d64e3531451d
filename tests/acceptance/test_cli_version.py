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
