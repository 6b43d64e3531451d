"""Applies ``migrations/V{n}__{name}.sql`` to one prefix (ADR 24).

Each file is applied in its own transaction, in version order, while a
session advisory lock for the prefix is held, so processes starting at once
apply each version exactly once. A per-prefix history table records version,
name, checksum and time. An applied file whose checksum changed, or a
database that knows versions this code does not, stops the run with a clear
error before anything else is applied.

``Migrator.pending`` and ``script`` say the same without applying anything:
the files ``migrate`` would apply now and, for ``venturi migrate --sql``, the
SQL it would run for them, statement for statement (ADR 0136).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import psycopg

from venturi.errors import ChecksumMismatch, DatabaseAhead, MigrationError
from venturi.naming import Prefix
from venturi.types import AppliedMigration

__all__ = ["MigrationFile", "Migrator", "load_migrations", "migrations_directory"]

logger = logging.getLogger(__name__)

# The history table is the runner's own, so its SQL lives here rather than in queries.sql.
_CREATE_HISTORY = """
CREATE TABLE IF NOT EXISTS {{prefix}}_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
_SELECT_HISTORY = "SELECT version, name, checksum FROM {{prefix}}_migrations ORDER BY version"
_INSERT_HISTORY = "INSERT INTO {{prefix}}_migrations (version, name, checksum) VALUES (%s, %s, %s)"
_HAS_HISTORY = "SELECT to_regclass('{{prefix}}_migrations') IS NOT NULL"
_LOCK = "SELECT pg_advisory_lock(hashtextextended(%s, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"

_FILE_NAME = re.compile(r"^V(?P<version>[1-9][0-9]*)__(?P<name>[a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class MigrationFile:
    version: int
    name: str
    template: str

    @property
    def checksum(self) -> str:
        """Of the file as written (token included), so it is the same for every prefix."""
        return hashlib.sha256(self.template.encode("utf-8")).hexdigest()


def migrations_directory() -> Traversable:
    """A source checkout's own ``migrations/``, else the wheel's ``venturi/_migrations``.

    The checkout comes first: an editable install holds a copy of the files made
    at install time, which a migration added since would be missing from.
    """
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "migrations").is_dir():
        return checkout / "migrations"
    return files("venturi").joinpath("_migrations")


def load_migrations(directory: Traversable | None = None) -> list[MigrationFile]:
    directory = directory if directory is not None else migrations_directory()
    found: dict[int, MigrationFile] = {}
    for entry in directory.iterdir():
        match = _FILE_NAME.match(entry.name)
        if match is None:
            continue
        version = int(match["version"])
        if version in found:
            raise MigrationError(f"two migration files for V{version}")
        found[version] = MigrationFile(version, match["name"], entry.read_text(encoding="utf-8"))
    versions = sorted(found)
    if versions != list(range(1, len(versions) + 1)):
        raise MigrationError(f"migration versions must be 1..n without gaps, found {versions}")
    return [found[v] for v in versions]


class Migrator:
    def __init__(self, prefix: Prefix, migrations: list[MigrationFile] | None = None) -> None:
        self._prefix = prefix
        self._migrations = migrations if migrations is not None else load_migrations()

    def migrate(self, conn: psycopg.Connection[Any]) -> list[AppliedMigration]:
        """Apply what is missing on ``conn`` (an autocommit connection of its own)."""
        lock_name = self._prefix.lock_name("migrate")
        conn.execute(_LOCK, (lock_name,))
        try:
            return self._migrate_locked(conn)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise MigrationError(
                f"the database role may not change the schema of prefix {self._prefix.value!r} "
                f"({str(exc).strip()}): run migrations as the tables' owner, see "
                "docs/operations/least-privilege.md"
            ) from exc
        finally:
            conn.execute(_UNLOCK, (lock_name,))

    def pending(self, conn: psycopg.Connection[Any]) -> list[MigrationFile]:
        """The files ``migrate`` would apply on ``conn`` now, in order; changes nothing.

        Raises ``DatabaseAhead`` or ``ChecksumMismatch`` as ``migrate`` would.
        """
        has_history = conn.execute(self._prefix.substitute(_HAS_HISTORY)).fetchone()
        return self._unapplied(conn) if has_history and has_history[0] else self._migrations

    def script(self, pending: list[MigrationFile]) -> str:
        """The SQL ``migrate`` runs to apply ``pending``, prefix substituted, in order.

        Statement for statement what ``migrate`` sends, its read of the history
        left out: the advisory lock, the history table, then each file in a
        transaction of its own with its history row, then the unlock. Values
        ``migrate`` sends as parameters are written as literals.
        """
        sql = self._prefix.substitute
        lock = _literal(self._prefix.lock_name("migrate"))
        versions = ", ".join(f"V{m.version}" for m in pending) or "none"
        parts = [
            f"-- venturi migrate --sql: prefix {self._prefix.value}, pending: {versions}",
            f"{_LOCK % lock};",
            f"{sql(_CREATE_HISTORY).strip()};",
        ]
        for m in pending:
            row = (str(m.version), _literal(m.name), _literal(m.checksum))
            parts += [
                f"-- V{m.version}__{m.name}",
                "BEGIN;",
                _terminated(sql(m.template)),
                f"{sql(_INSERT_HISTORY) % row};",
                "COMMIT;",
            ]
        parts.append(f"{_UNLOCK % lock};")
        return "\n".join(parts) + "\n"

    def _unapplied(self, conn: psycopg.Connection[Any]) -> list[MigrationFile]:
        """The files the history table does not list, after checking the ones it does."""
        applied = {
            int(version): (str(name), str(checksum))
            for version, name, checksum in conn.execute(
                self._prefix.substitute(_SELECT_HISTORY)
            ).fetchall()
        }
        known = {m.version: m for m in self._migrations}
        if applied and max(applied) > max(known, default=0):
            raise DatabaseAhead(max(applied), max(known, default=0))
        for version, (name, checksum) in applied.items():
            if known[version].checksum != checksum:
                raise ChecksumMismatch(version, name)
        return [m for m in self._migrations if m.version not in applied]

    def _migrate_locked(self, conn: psycopg.Connection[Any]) -> list[AppliedMigration]:
        conn.execute(self._prefix.substitute(_CREATE_HISTORY))
        done: list[AppliedMigration] = []
        for migration in self._unapplied(conn):
            try:
                self._apply(conn, migration)
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                raise MigrationError(
                    f"migration V{migration.version}__{migration.name} failed and was rolled "
                    f"back: {exc}"
                ) from exc
            logger.info(
                "applied migration V%d__%s to prefix %s",
                migration.version,
                migration.name,
                self._prefix.value,
            )
            done.append(AppliedMigration(migration.version, migration.name))
        return done

    def _apply(self, conn: psycopg.Connection[Any], migration: MigrationFile) -> None:
        with conn.transaction():
            conn.execute(self._prefix.substitute(migration.template))
            conn.execute(
                self._prefix.substitute(_INSERT_HISTORY),
                (migration.version, migration.name, migration.checksum),
            )


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (standard_conforming_strings, the default)."""
    return "'" + text.replace("'", "''") + "'"


def _terminated(statements: str) -> str:
    """A file's SQL ending in a semicolon, so the next statement starts afresh."""
    body = statements.rstrip()
    return body if body.endswith(";") else f"{body}\n;"
