"""Run control in the Backend contract (ADR 0121): the traceback stored by ``finish``,
cancellation requests through ``cancel_job``, reported by ``renew_leases``, and honoured
by ``finish``, ``release``, ``recover_stale`` and ``retry_job`` (venturi/backend.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from backends import LEASE, ClaimAll, new_job

from venturi.backend import Backend
from venturi.errors import InvalidState
from venturi.types import Claim, Finished, Outcome, OutcomeKind, Status

TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: boom\n'


def running(backend: Backend, claim_all: ClaimAll, count: int = 1) -> list[Claim]:
    backend.enqueue([new_job() for _ in range(count)])
    return [job.claim for job in claim_all()]


def row(db: Any, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (job_id,))
    return job


# -- tracebacks ---------------------------------------------------------------------------


def test_finish_stores_each_outcomes_traceback_on_its_journal_entry(
    backend: Backend, claim_all: ClaimAll
) -> None:
    failed, completed = running(backend, claim_all, 2)

    backend.finish(
        [
            Finished(
                failed,
                Outcome(OutcomeKind.RETRIED, note="ValueError: boom", is_failure=True,
                        traceback=TRACEBACK),
            ),
            Finished(completed, Outcome(OutcomeKind.COMPLETED)),
        ]
    )  # fmt: skip

    detail = backend.get_job(failed.job_id)
    assert detail is not None
    [entry] = detail.journal
    assert (entry.outcome, entry.note, entry.traceback) == (
        OutcomeKind.RETRIED,
        "ValueError: boom",
        TRACEBACK,
    )
    other = backend.get_job(completed.job_id)
    assert other is not None
    assert [e.traceback for e in other.journal] == [None]


# -- cancel_job on a claimed job ----------------------------------------------------------


def test_cancelling_a_claimed_job_requests_it_and_leaves_the_claim_alone(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    before = row(db, claim.job_id)

    job = backend.cancel_job(claim.job_id)

    assert (job.status, job.claimed_by, job.run_count) == (
        Status.CLAIMED,
        claim.claimed_by,
        claim.run_count,
    )
    assert job.cancel_requested_at is not None
    after = row(db, claim.job_id)
    assert after["cancel_requested_at"] == job.cancel_requested_at
    assert {k: v for k, v in after.items() if k != "cancel_requested_at"} == {
        k: v for k, v in before.items() if k != "cancel_requested_at"
    }
    assert db.journal(claim.job_id) == []
    again = backend.cancel_job(claim.job_id)
    assert again.cancel_requested_at == job.cancel_requested_at  # the first request's time


def test_a_terminal_job_cannot_be_cancelled(backend: Backend, db: Any, claim_all: ClaimAll) -> None:
    [claim] = running(backend, claim_all)
    backend.finish([Finished(claim, Outcome(OutcomeKind.COMPLETED))])

    with pytest.raises(InvalidState, match="only pending or claimed jobs"):
        backend.cancel_job(claim.job_id)
    assert row(db, claim.job_id)["cancel_requested_at"] is None


# -- renew_leases reports requests -------------------------------------------------------


def test_renewal_reports_which_held_claims_have_a_cancellation_request(
    backend: Backend, claim_all: ClaimAll
) -> None:
    cancelled, other = running(backend, claim_all, 2)
    backend.cancel_job(cancelled.job_id)

    renewal = backend.renew_leases([cancelled, other], LEASE)

    assert renewal.held == {cancelled.job_id, other.job_id}
    assert renewal.cancel_requested == {cancelled.job_id}


def test_renewal_never_reports_a_lost_claim_even_with_a_request(
    backend: Backend, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    backend.cancel_job(claim.job_id)
    stale = Claim(claim.job_id, "someone-else:1", claim.run_count)

    renewal = backend.renew_leases([stale], LEASE)

    assert renewal.held == set()
    assert renewal.cancel_requested == set()


# -- what ends a cancelled job ------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "note"),
    [
        (Outcome(OutcomeKind.RETRIED, note="ValueError: x", is_failure=True),
         "cancelled (the run ended retried: ValueError: x)"),
        (Outcome(OutcomeKind.PAUSED, delay=timedelta(hours=1)),
         "cancelled (the run ended paused)"),
    ],
    ids=["retried", "paused"],
)  # fmt: skip
def test_a_cancelled_job_that_would_run_again_is_recorded_dead_instead(
    backend: Backend, db: Any, claim_all: ClaimAll, outcome: Outcome, note: str
) -> None:
    [claim] = running(backend, claim_all)
    backend.cancel_job(claim.job_id)

    assert backend.finish([Finished(claim, outcome)]) == {claim.job_id}

    job = row(db, claim.job_id)
    assert (job["status"], job["finished_at"] is not None, job["claimed_by"]) == (
        "dead",
        True,
        None,
    )
    assert job["failure_count"] == int(outcome.is_failure)
    assert [(e["outcome"], e["note"]) for e in db.journal(claim.job_id)] == [("dead", note)]


@pytest.mark.parametrize("kind", [OutcomeKind.COMPLETED, OutcomeKind.DEAD])
def test_a_cancelled_job_that_ends_anyway_keeps_its_ending(
    backend: Backend, db: Any, claim_all: ClaimAll, kind: OutcomeKind
) -> None:
    [claim] = running(backend, claim_all)
    backend.cancel_job(claim.job_id)

    backend.finish([Finished(claim, Outcome(kind, note="done"))])

    assert row(db, claim.job_id)["status"] == kind.value
    assert [(e["outcome"], e["note"]) for e in db.journal(claim.job_id)] == [(kind.value, "done")]


def test_releasing_a_cancelled_claim_ends_it_dead(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    cancelled, other = running(backend, claim_all, 2)
    backend.cancel_job(cancelled.job_id)

    assert backend.release([cancelled, other]) == 2

    assert row(db, cancelled.job_id)["status"] == "dead"
    assert row(db, cancelled.job_id)["finished_at"] is not None
    assert row(db, other.job_id)["status"] == "pending"
    assert [(e["outcome"], e["note"]) for e in db.journal(cancelled.job_id)] == [
        ("dead", "cancelled (worker shutdown)")
    ]


def test_recovering_a_cancelled_claim_ends_it_dead_and_counts_the_failure(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    backend.cancel_job(claim.job_id)
    db.execute(
        "UPDATE {{prefix}}_jobs SET claim_expires_at = now() - interval '1 second' WHERE id = %s",
        (claim.job_id,),
    )

    assert backend.recover_stale(max_failures={}, default_max_failures=20, limit=10) == 1

    job = row(db, claim.job_id)
    assert (job["status"], job["failure_count"]) == ("dead", 1)
    assert [(e["outcome"], e["note"]) for e in db.journal(claim.job_id)] == [
        ("dead", f"cancelled (lease of {claim.claimed_by} expired)")
    ]


def test_retrying_a_cancelled_job_clears_the_request(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    backend.cancel_job(claim.job_id)
    backend.finish([Finished(claim, Outcome(OutcomeKind.DEAD, note="cancelled"))])

    retried = backend.retry_job(claim.job_id)

    assert (retried.status, retried.cancel_requested_at) == (Status.PENDING, None)
    [again] = claim_all()
    assert backend.renew_leases([again.claim], LEASE).cancel_requested == set()
