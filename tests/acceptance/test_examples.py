"""Every example in examples/ runs to completion, each on a database of its own."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def example_database(database_url: str) -> Iterator[str]:
    """A throwaway database, so the examples' default prefix touches nothing else."""
    name = f"venturi_examples_{secrets.token_hex(4)}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield make_conninfo(database_url, dbname=name)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        ("quickstart.py", [], "completed"),
        ("in_web_server.py", ["--self-test"], ""),
        ("periodic.py", ["--once"], ""),
    ],
)
def test_example_runs(example_database: str, script: str, args: list[str], expected: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env={**os.environ, "VENTURI_DATABASE_URL": example_database},
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert expected in result.stdout
