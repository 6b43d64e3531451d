"""Fixtures of the acceptance tests that run examples."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo


@pytest.fixture
def example_database(database_url: str) -> Iterator[str]:
    """A throwaway database, so the examples' default prefix touches nothing else."""
    name = f"venturi_examples_{secrets.token_hex(4)}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield make_conninfo(database_url, dbname=name)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
