"""``check_schema`` (a service's start check) and ``list_job_summaries`` (last notes)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from backends import BackendCase, ClaimAll, drop_prefix_tables, new_job
from psycopg.conninfo import conninfo_to_dict

from venturi.backend import Backend
from venturi.errors import SchemaMissing
from venturi.types import Finished, Outcome, OutcomeKind


def test_check_schema_names_the_database_without_its_password(
    backend: Backend, database_url: str
) -> None:
    params = conninfo_to_dict(database_url)
    where = backend.check_schema()

    assert where.endswith(f"/{params.get('dbname', 'test')}"), where
    assert ":" in where
    assert "password" not in where


@pytest.fixture
def unmigrated_prefix(database_url: str) -> Iterator[str]:
    value = f"t_{secrets.token_hex(5)}"
    yield value
    drop_prefix_tables(database_url, value)  # a test may migrate it


def test_check_schema_of_an_unmigrated_prefix_says_run_migrate(
    backend_case: BackendCase, database_url: str, unmigrated_prefix: str
) -> None:
    backend = backend_case.build(database_url, unmigrated_prefix)
    try:
        with pytest.raises(SchemaMissing, match="run `venturi migrate`"):
            backend.check_schema()
        backend.migrate()
        assert backend.check_schema()
    finally:
        backend.close()


def test_job_summaries_carry_the_newest_entrys_outcome_and_note_of_each_job(
    backend: Backend, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job() for _ in range(3)])
    retried, completed, silent = (job.claim for job in claim_all())
    backend.finish(
        [
            Finished(retried, Outcome(OutcomeKind.RETRIED, note="E: boom", is_failure=True)),
            Finished(completed, Outcome(OutcomeKind.COMPLETED, note="42")),
            Finished(silent, Outcome(OutcomeKind.COMPLETED)),
        ]
    )
    never_run = new_job()
    backend.enqueue([never_run])

    page = backend.list_job_summaries(status=None, kind=None, note=None, limit=10, after=None)

    last = {s.job.id: (s.last_outcome, s.last_note) for s in page.jobs}
    assert last == {
        retried.job_id: (OutcomeKind.RETRIED, "E: boom"),
        completed.job_id: (OutcomeKind.COMPLETED, "42"),
        silent.job_id: (OutcomeKind.COMPLETED, None),
        never_run.id: (None, None),
    }
    assert page.next is None
