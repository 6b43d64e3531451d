"""The wheel carries the migrations and the query file, so an installed venturi can migrate."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_migrations_and_queries(tmp_path: Path) -> None:
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

    shipped = {n.removeprefix("venturi/_migrations/") for n in names if "_migrations/" in n}
    assert shipped == {p.name for p in (ROOT / "migrations").glob("V*.sql")}
    assert "venturi/postgres/queries.sql" in names
    assert "venturi/py.typed" in names
