"""The wheel carries what an installed venturi needs: the migrations and the query file
(so it can migrate), and the dashboard's templates and static files (nothing is built
at install). The wheel is built once for the module."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "venturi" / "dashboard"


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("venturi-*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


@pytest.mark.slow
def test_the_wheel_ships_migrations_and_queries(wheel_names: set[str]) -> None:
    shipped = {n.removeprefix("venturi/_migrations/") for n in wheel_names if "_migrations/" in n}
    assert shipped == {p.name for p in (ROOT / "migrations").glob("V*.sql")}
    assert "venturi/postgres/queries.sql" in wheel_names
    assert "venturi/py.typed" in wheel_names


def test_the_wheel_ships_every_dashboard_template_and_asset(wheel_names: set[str]) -> None:
    expected = {
        f"venturi/dashboard/{path.relative_to(DASHBOARD).as_posix()}"
        for folder in ("templates", "static")
        for path in (DASHBOARD / folder).iterdir()
    }
    assert len(expected) > 10
    assert expected <= wheel_names
