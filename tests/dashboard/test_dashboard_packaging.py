"""The wheel ships the dashboard's templates and static files: nothing is built at install."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "venturi" / "dashboard"


def test_the_wheel_ships_every_template_and_asset(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("venturi-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"venturi/dashboard/{path.relative_to(PACKAGE).as_posix()}"
        for folder in ("templates", "static")
        for path in (PACKAGE / folder).iterdir()
    }
    assert len(expected) > 10
    assert expected <= names
