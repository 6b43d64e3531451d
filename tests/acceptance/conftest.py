"""Fixtures of the acceptance tests: the console script on the test prefix, examples' databases."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from cli_support import COMMAND_TIMEOUT, HERE, Run, cli_env
from psycopg.conninfo import make_conninfo

import venturi


@pytest.fixture
def example_database(database_url: str) -> Iterator[str]:
    """A throwaway database, so the examples' default prefix touches nothing else."""
    name = f"venturi_examples_{secrets.token_hex(4)}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield make_conninfo(database_url, dbname=name)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def venturi_cli(database_url: str, prefix: str) -> Run:
    """Run ``venturi ARGS`` on the test prefix (``--prefix`` is added unless given)."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        argv = list(args) if "--prefix" in args or "--app" in args else [*args, "--prefix", prefix]
        return subprocess.run(
            [sys.executable, "-m", "venturi", *argv],
            capture_output=True,
            text=True,
            cwd=HERE,
            env=env or cli_env(database_url, prefix),
            timeout=COMMAND_TIMEOUT,
            check=False,
        )

    return run


@pytest.fixture
def double(app: venturi.App) -> Any:
    """The test side of cli_app's ``cli.double`` task, to enqueue through the fixture App."""

    @app.task(kind="cli.double")
    def double(n: int) -> int:
        return n * 2

    return double
