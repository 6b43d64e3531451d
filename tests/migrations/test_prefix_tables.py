"""The tests' one source of a prefix's tables (``support.prefix_tables``) against real migrations.

It reads the catalog, so it must find every table the migrations make (a new
migration's too) and nothing of a longer prefix that starts with the same
letters.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support import (
    PREFIX_TABLES,
    drop_prefix_tables,
    empty_prefix,
    migration_tables,
    prefix_tables,
)

import venturi


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


def _migrate(database_url: str, prefix: str) -> None:
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)
    app.migrate()
    app.close()


def test_finds_every_table_the_migrations_create_and_drops_them_all(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    prefix = f"pt_{secrets.token_hex(5)}"
    _migrate(database_url, prefix)
    created = {f"{prefix}_{name}" for name in migration_tables()}
    try:
        assert set(prefix_tables(conn, prefix)) == {*created, f"{prefix}_migrations"}
        assert {f"{prefix}_{name}" for name in PREFIX_TABLES} == set(prefix_tables(conn, prefix))
    finally:
        drop_prefix_tables(conn, prefix)
    assert prefix_tables(conn, prefix) == []


def test_a_longer_prefix_keeps_its_tables(database_url: str, conn: psycopg.Connection[Any]) -> None:
    short = f"pt_{secrets.token_hex(5)}"
    longer = f"{short}_x"
    _migrate(database_url, short)
    _migrate(database_url, longer)
    try:
        assert not any(t.startswith(f"{longer}_") for t in prefix_tables(conn, short))
        drop_prefix_tables(conn, short)
        assert f"{longer}_jobs" in prefix_tables(conn, longer)
    finally:
        drop_prefix_tables(conn, short)
        drop_prefix_tables(conn, longer)


def test_empty_prefix_keeps_the_history_and_the_registry(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    prefix = f"pt_{secrets.token_hex(5)}"
    _migrate(database_url, prefix)
    try:
        conn.execute(
            f"INSERT INTO {prefix}_workers (id, version, kinds, concurrency, started_at,"
            " heartbeat_at, expires_at) VALUES ('w', '1', '{}', 1, now(), now(), now())"
        )
        conn.execute(
            f"INSERT INTO {prefix}_jobs (id, kind, payload, status, created_at, visible_at)"
            " VALUES ('j', 'k', '{}', 'pending', now(), now())"
        )
        empty_prefix(conn, prefix)
        counts = {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            for table in (f"{prefix}_jobs", f"{prefix}_workers", f"{prefix}_migrations")
        }
        assert counts[f"{prefix}_jobs"] == (0,)
        assert counts[f"{prefix}_workers"] == (1,)
        assert counts[f"{prefix}_migrations"] != (0,)
    finally:
        drop_prefix_tables(conn, prefix)
