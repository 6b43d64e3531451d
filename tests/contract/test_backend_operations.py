"""Operator verbs and the backend's own lifecycle: retry_job, cancel_job, cleanup, migrate,
close (ADR 5, 18, 24, 0105; the contract in venturi/backend.py)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from backends import BackendCase, ClaimAll, drop_prefix_tables, new_job
from ulid import ULID

from venturi.backend import Backend
from venturi.errors import InvalidState, JobNotFound, SchemaMissing
from venturi.postgres.migrator import load_migrations
from venturi.types import AppliedMigration, Finished, Outcome, OutcomeKind, Status


def ended(backend: Backend, claim_all: ClaimAll, kind: OutcomeKind, count: int = 1) -> list[str]:
    """``count`` jobs run to ``kind`` (COMPLETED or DEAD)."""
    backend.enqueue([new_job() for _ in range(count)])
    claimed = claim_all()
    outcome = Outcome(kind, is_failure=kind is OutcomeKind.DEAD)
    backend.finish([Finished(job.claim, outcome) for job in claimed])
    return [job.claim.job_id for job in claimed]


def status_of(db: Any, job_id: str) -> str:
    status: str = db.scalar("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (job_id,))
    return status


# -- retry_job / cancel_job ---------------------------------------------------------------


def test_retry_makes_a_dead_job_pending_now_with_a_fresh_failure_budget(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    [job_id] = ended(backend, claim_all, OutcomeKind.DEAD)

    row = backend.retry_job(job_id)

    assert (row.id, row.status, row.failure_count, row.finished_at) == (
        job_id,
        Status.PENDING,
        0,
        None,
    )
    assert db.scalar("SELECT visible_at <= now() FROM {{prefix}}_jobs WHERE id = %s", (job_id,))
    assert [(e["outcome"], e["note"]) for e in db.journal(job_id)][-1] == (
        "retried",
        "retried by operator",
    )
    assert [job.claim.job_id for job in claim_all()] == [job_id]


def test_cancel_makes_a_pending_job_dead_with_the_note(backend: Backend, db: Any) -> None:
    job = new_job(delay=timedelta(days=1))  # scheduled work is pending too
    backend.enqueue([job])

    row = backend.cancel_job(job.id, note="not needed")

    assert (row.status, row.finished_at is not None) == (Status.DEAD, True)
    assert status_of(db, job.id) == "dead"
    [entry] = db.journal(job.id)
    assert (entry["outcome"], entry["note"]) == ("dead", "not needed")
    assert backend.cancel_job(backend.retry_job(job.id).id).status is Status.DEAD
    assert db.journal(job.id)[-1]["note"] == "cancelled"


@pytest.mark.parametrize("operation", ["retry_job", "cancel_job"])
def test_an_unknown_id_raises_job_not_found(backend: Backend, operation: str) -> None:
    unknown = str(ULID())
    with pytest.raises(JobNotFound) as raised:
        getattr(backend, operation)(unknown)
    assert raised.value.job_id == unknown


@pytest.mark.parametrize(
    ("operation", "statuses"),
    # A claimed job can be cancelled (a request, ADR 0121): test_backend_run_control.py.
    [("retry_job", ["pending", "claimed", "completed"]), ("cancel_job", ["completed", "dead"])],
)
def test_an_operation_on_a_job_in_another_status_raises_invalid_state_and_writes_nothing(
    backend: Backend, db: Any, claim_all: ClaimAll, operation: str, statuses: list[str]
) -> None:
    jobs = {
        "pending": new_job(delay=timedelta(hours=1)),
        "claimed": new_job(),
    }
    backend.enqueue(list(jobs.values()))
    claim_all()
    ids = {status: job.id for status, job in jobs.items()}
    ids["completed"] = ended(backend, claim_all, OutcomeKind.COMPLETED)[0]
    ids["dead"] = ended(backend, claim_all, OutcomeKind.DEAD)[0]

    for status in statuses:
        before = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (ids[status],))
        entries = db.journal(ids[status])
        with pytest.raises(InvalidState) as raised:
            getattr(backend, operation)(ids[status])
        assert raised.value.status == status
        assert db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (ids[status],)) == before
        assert db.journal(ids[status]) == entries


# -- cleanup (ADR 18) ---------------------------------------------------------------------


def test_cleanup_deletes_terminal_jobs_finished_before_the_cutoff_with_their_journals(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    old_completed = ended(backend, claim_all, OutcomeKind.COMPLETED)
    old_dead = ended(backend, claim_all, OutcomeKind.DEAD)
    db.execute("UPDATE {{prefix}}_jobs SET finished_at = now() - interval '8 days'")
    recent = ended(backend, claim_all, OutcomeKind.COMPLETED)
    backend.enqueue([new_job()])
    claim_all()
    pending = new_job()
    backend.enqueue([pending])
    db.execute("UPDATE {{prefix}}_jobs SET created_at = now() - interval '30 days'")

    assert backend.cleanup(older_than=timedelta(days=7), status=None, batch_size=100) == 2

    left = {row["id"]: row["status"] for row in db.jobs()}
    assert not set(old_completed + old_dead) & set(left)
    assert recent[0] in left and pending.id in left
    assert sorted(left.values()) == ["claimed", "completed", "pending"]
    assert {e["job_id"] for e in db.journal()} == set(recent)


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.DEAD])
def test_cleanup_of_one_status_leaves_the_other(
    backend: Backend, db: Any, claim_all: ClaimAll, status: Status
) -> None:
    completed = ended(backend, claim_all, OutcomeKind.COMPLETED)
    dead = ended(backend, claim_all, OutcomeKind.DEAD)

    assert backend.cleanup(older_than=timedelta(0), status=status, batch_size=100) == 1

    kept = dead if status is Status.COMPLETED else completed
    assert [row["id"] for row in db.jobs()] == kept


def test_cleanup_works_through_several_batches_and_returns_the_total(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    ended(backend, claim_all, OutcomeKind.COMPLETED, count=25)

    assert backend.cleanup(older_than=timedelta(0), status=None, batch_size=10) == 25
    assert db.jobs() == []
    assert backend.cleanup(older_than=timedelta(0), status=None, batch_size=10) == 0


# -- migrate / close / a missing schema ------------------------------------------------------


def test_migrate_on_a_migrated_prefix_applies_nothing(backend: Backend) -> None:
    assert backend.migrate() == []


@pytest.fixture
def fresh_prefix(database_url: str) -> Iterator[str]:
    value = f"t_{secrets.token_hex(5)}"
    yield value
    drop_prefix_tables(database_url, value)


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
