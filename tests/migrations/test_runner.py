"""The migration runner: idempotence, concurrency, history per prefix, refusals."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support import drop_prefix_tables

import venturi
from venturi.errors import ChecksumMismatch, DatabaseAhead, MigrationError
from venturi.naming import Prefix
from venturi.postgres.migrator import MigrationFile, Migrator, load_migrations


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def fresh_prefixes(conn: psycopg.Connection[Any]) -> Iterator[list[str]]:
    made: list[str] = []

    def make() -> str:
        made.append(f"m_{secrets.token_hex(5)}")
        return made[-1]

    yield [make(), make()]
    for value in made:
        drop_prefix_tables(conn, value)


def history(conn: psycopg.Connection[Any], prefix: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        f"SELECT version, name, checksum FROM {prefix}_migrations ORDER BY version"
    ).fetchall()


def test_migrate_applies_every_version_once_and_then_is_a_no_op(
    database_url: str, conn: psycopg.Connection[Any], fresh_prefixes: list[str]
) -> None:
    app = venturi.App(database_url, prefix=fresh_prefixes[0], set_as_current=False)
    try:
        first = app.migrate()
        second = app.migrate()
    finally:
        app.close()

    assert [m.version for m in first] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    assert second == []
    rows = history(conn, fresh_prefixes[0])
    names = [(v, n) for v, n, _ in rows]
    assert names[:4] == [
        (1, "initial_schema"),
        (2, "history_pagination_index"),
        (3, "index_tuning"),
        (4, "workers"),
    ]
    assert names[4:] == [
        (5, "run_control"),
        (6, "results_and_workflows"),
        (7, "trace_context"),
        (8, "claim_limits"),
        (9, "workflows"),
        (10, "fair_claims"),
        (11, "expires"),
        (12, "durable"),
        (13, "key_limits"),
        (14, "run_time_control"),
    ]
    assert [c for _, _, c in rows] == [m.checksum for m in load_migrations()]


def test_two_prefixes_migrate_and_track_history_independently(
    conn: psycopg.Connection[Any], fresh_prefixes: list[str]
) -> None:
    one, two = fresh_prefixes
    Migrator(Prefix.parse(one), load_migrations()[:1]).migrate(conn)
    Migrator(Prefix.parse(two)).migrate(conn)

    assert [r[0] for r in history(conn, one)] == [1]
    assert [r[0] for r in history(conn, two)] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    Migrator(Prefix.parse(one)).migrate(conn)
    assert [r[0] for r in history(conn, one)] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]


def test_four_processes_migrating_at_once_apply_each_version_once(
    database_url: str, conn: psycopg.Connection[Any], fresh_prefixes: list[str]
) -> None:
    prefix = fresh_prefixes[0]
    script = (
        "import sys, venturi\n"
        "app = venturi.App(sys.argv[1], prefix=sys.argv[2])\n"
        "print(len(app.migrate()))\n"
        "app.close()\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, database_url, prefix],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=60) for p in procs]

    assert [p.returncode for p in procs] == [0, 0, 0, 0], results
    assert sorted(int(out) for out, _ in results) == [0, 0, 0, 14]
    assert [r[0] for r in history(conn, prefix)] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]


def test_an_edited_migration_is_refused(
    conn: psycopg.Connection[Any], fresh_prefixes: list[str]
) -> None:
    prefix = Prefix.parse(fresh_prefixes[0])
    Migrator(prefix).migrate(conn)
    tampered = load_migrations()
    tampered[1] = MigrationFile(2, tampered[1].name, tampered[1].template + "\n-- edited\n")

    with pytest.raises(ChecksumMismatch, match="V2__history_pagination_index was edited"):
        Migrator(prefix, tampered).migrate(conn)


def test_a_database_ahead_of_the_code_is_refused(
    conn: psycopg.Connection[Any], fresh_prefixes: list[str]
) -> None:
    prefix = Prefix.parse(fresh_prefixes[0])
    Migrator(prefix, load_migrations()[:3]).migrate(conn)

    with pytest.raises(DatabaseAhead, match="at migration V3 but this code knows only up to V2"):
        Migrator(prefix, load_migrations()[:2]).migrate(conn)


def test_a_failing_migration_leaves_no_partial_version(
    conn: psycopg.Connection[Any], fresh_prefixes: list[str]
) -> None:
    prefix = Prefix.parse(fresh_prefixes[0])
    broken = [
        *load_migrations()[:1],
        MigrationFile(2, "broken", "CREATE INDEX {{prefix}}_x ON nowhere (a);"),
    ]

    with pytest.raises(MigrationError, match="V2__broken failed and was rolled back"):
        Migrator(prefix, broken).migrate(conn)
    assert [r[0] for r in history(conn, prefix.value)] == [1]


def test_v8_adds_the_claim_limits_table(
    conn: psycopg.Connection[Any], fresh_prefixes: list[str]
) -> None:
    prefix = fresh_prefixes[0]
    Migrator(Prefix.parse(prefix)).migrate(conn)
    columns = conn.execute(
        "SELECT column_name, is_nullable, column_default FROM information_schema.columns"
        " WHERE table_name = %s ORDER BY ordinal_position",
        [f"{prefix}_claim_limits"],
    ).fetchall()
    assert [(name, nullable) for name, nullable, _ in columns] == [
        ("kind", "NO"),
        ("next_start_at", "NO"),
    ]
    (primary_key,) = conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype = 'p'",
        [f"{prefix}_claim_limits"],
    ).fetchone() or (None,)
    assert primary_key == "PRIMARY KEY (kind)"


def test_v9_adds_the_workflow_columns_and_the_steps_and_edges_tables(
    conn: psycopg.Connection[Any], fresh_prefixes: list[str]
) -> None:
    prefix = fresh_prefixes[0]
    Migrator(Prefix.parse(prefix)).migrate(conn)
    added = conn.execute(
        "SELECT column_name, is_nullable, column_default FROM information_schema.columns"
        " WHERE table_name = %s AND column_name = ANY(%s) ORDER BY ordinal_position",
        [f"{prefix}_jobs", ["workflow_id"]],
    ).fetchall()
    assert added == [("workflow_id", "YES", None)]
    for table, key in (
        ("steps", "PRIMARY KEY (id)"),
        ("edges", "PRIMARY KEY (parent_id, child_id)"),
    ):
        (primary_key,) = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = %s::regclass AND contype = 'p'",
            [f"{prefix}_{table}"],
        ).fetchone() or (None,)
        assert primary_key == key
