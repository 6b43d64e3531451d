"""The Schema role (venturi/backend/): ``migrate`` (ADR 24), ``pending_migrations``
(ADR 0136, 0140), ``check_schema`` (a service's start check, ADR 0118) and ``close``."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from backends import BackendCase, new_job
from psycopg.conninfo import conninfo_to_dict
from support import drop_prefix  # type: ignore[import-untyped, unused-ignore]  # not on mypy's path
from ulid import ULID

from venturi.backend import Backend
from venturi.errors import SchemaMissing
from venturi.postgres.migrator import load_migrations
from venturi.types import AppliedMigration


def test_check_schema_names_the_database_without_its_password(
    backend: Backend, database_url: str
) -> None:
    params = conninfo_to_dict(database_url)
    where = backend.check_schema()

    assert where.endswith(f"/{params.get('dbname', 'test')}"), where
    assert ":" in where
    assert "password" not in where


def test_check_schema_of_an_unmigrated_prefix_says_run_migrate(
    backend_case: BackendCase, database_url: str, fresh_prefix: str
) -> None:
    backend = backend_case.build(database_url, fresh_prefix)
    try:
        with pytest.raises(SchemaMissing, match="run `venturi migrate`"):
            backend.check_schema()
        backend.migrate()
        assert backend.check_schema()
    finally:
        backend.close()


def test_migrate_on_a_migrated_prefix_applies_nothing(backend: Backend) -> None:
    assert backend.migrate() == []


@pytest.fixture
def fresh_prefix(database_url: str) -> Iterator[str]:
    value = f"t_{secrets.token_hex(5)}"
    yield value
    drop_prefix(database_url, value)


def test_migrate_applies_every_version_once_then_nothing(
    backend_case: BackendCase, database_url: str, fresh_prefix: str
) -> None:
    backend = backend_case.build(database_url, fresh_prefix)
    try:
        with pytest.raises(SchemaMissing):
            backend.get_job(str(ULID()))

        applied = backend.migrate()

        assert [(m.version, m.name) for m in applied] == [
            (m.version, m.name) for m in load_migrations()
        ]
        assert [(m.version, m.name) for m in applied][:4] == [
            (1, "initial_schema"),
            (2, "history_pagination_index"),
            (3, "index_tuning"),
            (4, "workers"),
        ]
        assert (5, "run_control") in [(m.version, m.name) for m in applied]
        assert all(isinstance(m, AppliedMigration) for m in applied)
        assert backend.migrate() == []
        assert backend.stats().kinds == ()
    finally:
        backend.close()


def test_close_is_idempotent(backend: Backend) -> None:
    backend.enqueue([new_job()])
    backend.close()
    backend.close()


def test_a_migrated_prefix_has_no_pending_migrations_and_a_script_that_applies_none(
    backend: Backend,
) -> None:
    pending, script = backend.pending_migrations()

    assert pending == []
    assert "BEGIN;" not in script
