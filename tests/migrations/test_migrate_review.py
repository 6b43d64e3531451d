"""``venturi migrate --sql`` and ``--check``: the SQL a DBA reviews, and a gate for deploys.

``--sql`` on a fresh prefix, applied by psycopg as a DBA's tool would run it,
must leave the catalog exactly as ``migrate`` does (every table of the prefix:
columns, constraints, indexes, and the history rows), and printing it applies
nothing. ``--check`` exits 1 while migrations are pending, 0 once they are not
(ADR 0136).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
from support import drop_prefix_tables, prefix_tables

from venturi.naming import Prefix
from venturi.postgres.migrator import Migrator, load_migrations

MIGRATIONS = load_migrations()


def venturi(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env["VENTURI_DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", "venturi", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def catalog(conn: psycopg.Connection[Any], prefix: str) -> dict[str, Any]:
    """Every table of the prefix: columns, constraints, indexes (prefix-normalised) and
    the history's versions, names and checksums."""

    def norm(value: object) -> str:
        return str(value).replace(prefix, "{{prefix}}")

    tables = prefix_tables(conn, prefix)
    columns = conn.execute(
        """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attidentity
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relname = ANY(%s) AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum
        """,
        (tables,),
    ).fetchall()
    constraints = conn.execute(
        """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
        WHERE c.relname = ANY(%s) ORDER BY c.relname, k.conname
        """,
        (tables,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s) ORDER BY indexname",
        (tables,),
    ).fetchall()
    history = conn.execute(
        Prefix.parse(prefix).substitute(
            "SELECT version, name, checksum FROM {{prefix}}_migrations ORDER BY version"
        )
    ).fetchall()
    return {
        "tables": [norm(t) for t in tables],
        "columns": [tuple(norm(v) for v in row) for row in columns],
        "constraints": [tuple(norm(v) for v in row) for row in constraints],
        "indexes": [(norm(name), norm(definition)) for name, definition in indexes],
        "history": history,
    }


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def new_prefix(conn: psycopg.Connection[Any]) -> Iterator[Any]:
    """Makes fresh prefix names; each one's tables are dropped afterwards."""
    made: list[str] = []

    def make() -> str:
        made.append(f"r_{secrets.token_hex(5)}")
        return made[-1]

    yield make
    for value in made:
        drop_prefix_tables(conn, value)


def test_the_printed_sql_applied_by_hand_builds_the_schema_migrate_builds(
    database_url: str, conn: psycopg.Connection[Any], new_prefix: Any
) -> None:
    by_migrate, by_hand = new_prefix(), new_prefix()
    Migrator(Prefix.parse(by_migrate)).migrate(conn)

    printed = venturi(database_url, "migrate", "--sql", "--prefix", by_hand)

    assert printed.returncode == 0, printed.stderr
    assert prefix_tables(conn, by_hand) == []  # printing applied nothing, not even the history
    conn.execute(printed.stdout)
    assert catalog(conn, by_hand) == catalog(conn, by_migrate)
    assert venturi(database_url, "migrate", "--prefix", by_hand).stdout == "schema is up to date\n"


def test_the_sql_of_a_partly_migrated_prefix_holds_only_the_pending_files_each_in_a_transaction(
    database_url: str, conn: psycopg.Connection[Any], new_prefix: Any
) -> None:
    value, reference = new_prefix(), new_prefix()
    Migrator(Prefix.parse(value), MIGRATIONS[:-2]).migrate(conn)
    Migrator(Prefix.parse(reference)).migrate(conn)

    script = venturi(database_url, "migrate", "--sql", "--prefix", value).stdout

    later = [f"-- V{m.version}__{m.name}" for m in MIGRATIONS[-2:]]
    assert [line for line in script.splitlines() if line.startswith("-- V")] == later
    assert script.count("BEGIN;") == script.count("COMMIT;") == 2
    assert Prefix.parse(value).substitute(MIGRATIONS[-1].template).strip() in script
    assert "{{prefix}}" not in script
    conn.execute(script)
    assert catalog(conn, value) == catalog(conn, reference)


def test_check_exits_1_naming_how_many_are_pending_then_0_once_migrated(
    database_url: str, conn: psycopg.Connection[Any], new_prefix: Any
) -> None:
    value = new_prefix()
    Migrator(Prefix.parse(value), MIGRATIONS[:-1]).migrate(conn)

    pending = venturi(database_url, "migrate", "--check", "--prefix", value)
    assert (pending.returncode, pending.stderr) == (1, "")
    last = MIGRATIONS[-1]
    assert pending.stdout == f"1 pending migration: V{last.version}__{last.name}\n"
    assert venturi(database_url, "migrate", "--check", "--prefix", value).returncode == 1

    assert venturi(database_url, "migrate", "--prefix", value).returncode == 0
    current = venturi(database_url, "migrate", "--check", "--prefix", value)
    assert (current.returncode, current.stdout) == (0, "schema is up to date\n")


def test_check_of_a_fresh_prefix_counts_every_file_and_creates_nothing(
    database_url: str, conn: psycopg.Connection[Any], new_prefix: Any
) -> None:
    value = new_prefix()

    pending = venturi(database_url, "migrate", "--check", "--json", "--prefix", value)

    assert pending.returncode == 1, pending.stderr
    assert [m["version"] for m in orjson.loads(pending.stdout)["pending"]] == [
        m.version for m in MIGRATIONS
    ]
    assert prefix_tables(conn, value) == []


def test_sql_and_check_together_or_sql_with_json_are_usage_errors(database_url: str) -> None:
    for args in (("--sql", "--check"), ("--sql", "--json")):
        done = venturi(database_url, "migrate", *args, "--prefix", "r_usage")
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("venturi: error: ")
