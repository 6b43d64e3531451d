"""The Operator role (venturi/backend/): ``retry_job`` and ``cancel_job`` (a claimed
job's cancellation request too), ``cleanup``, and reading rows back: ``get_job``,
``list_jobs``, ``list_job_summaries`` (last notes), ``stats`` and ``backlog`` (ADR 5,
18, 0105, 0121, 0136); an operator's retry clears an expiry (ADR 0135)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from backends import KIND, LEASE, ClaimAll, new_job, running, stored_row
from ulid import ULID

from venturi.backend import Backend
from venturi.errors import InvalidState, JobNotFound
from venturi.types import Cursor, Finished, Outcome, OutcomeKind, Priority, Status


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


def all_pages(backend: Backend, *, limit: int, **filters: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    after: Cursor | None = None
    while True:
        page = backend.list_jobs(
            status=filters.get("status"), kind=filters.get("kind"), limit=limit, after=after
        )
        pages.append([job.id for job in page.jobs])
        if page.next is None:
            return pages
        after = page.next


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
    # A claimed job can be cancelled (a request, ADR 0121): below.
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


def test_cancelling_a_claimed_job_requests_it_and_leaves_the_claim_alone(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    before = stored_row(db, claim.job_id)

    job = backend.cancel_job(claim.job_id)

    assert (job.status, job.claimed_by, job.run_count) == (
        Status.CLAIMED,
        claim.claimed_by,
        claim.run_count,
    )
    assert job.cancel_requested_at is not None
    after = stored_row(db, claim.job_id)
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
    assert stored_row(db, claim.job_id)["cancel_requested_at"] is None


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


def test_retrying_an_expired_job_clears_its_expiry_so_it_runs(
    backend: Backend, claim_all: ClaimAll
) -> None:
    """get_job reads the expiry back; an operator's retry (one job or by filter) drops it."""
    one, other = (new_job(expires_in=timedelta(microseconds=1)) for _ in range(2))
    backend.enqueue([one, other])
    claimed = claim_all()
    assert [job.is_expired for job in claimed] == [True, True]
    expired = Outcome(OutcomeKind.DEAD, note="expired")
    backend.finish([Finished(job.claim, expired) for job in claimed])
    detail = backend.get_job(one.id)
    assert detail is not None and detail.job.expires_at is not None

    assert backend.retry_job(one.id).expires_at is None
    assert backend.retry_matching(kind=KIND, note="expired", batch_size=10) == 1

    assert [(job.claim.job_id, job.is_expired) for job in claim_all()] == [
        (one.id, False),
        (other.id, False),
    ]
    detail = backend.get_job(one.id)
    assert detail is not None and detail.job.expires_at is None


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


# -- get_job --------------------------------------------------------------------------


def test_get_job_of_a_missing_id_is_none(backend: Backend) -> None:
    assert backend.get_job(str(ULID())) is None


def test_get_job_gives_the_row_and_its_journal_in_recording_order(
    backend: Backend, claim_all: ClaimAll
) -> None:
    job = new_job(payload='{"n": 1}', priority=Priority.LOW, dedup_key="k")
    backend.enqueue([job])
    [first] = claim_all()
    backend.finish(
        [Finished(first.claim, Outcome(OutcomeKind.RETRIED, note="E: x", is_failure=True))]
    )
    [second] = claim_all()
    backend.finish([Finished(second.claim, Outcome(OutcomeKind.COMPLETED, carry='{"c": 2}'))])

    detail = backend.get_job(job.id)

    assert detail is not None
    row = detail.job
    assert (row.id, row.kind, row.payload, row.priority, row.status) == (
        job.id,
        KIND,
        {"n": 1},
        Priority.LOW,
        Status.COMPLETED,
    )
    assert (row.run_count, row.failure_count, row.carry, row.dedup_key) == (2, 1, {"c": 2}, "k")
    assert row.finished_at is not None and row.claimed_by is None
    assert [(e.outcome, e.run_no, e.note) for e in detail.journal] == [
        (OutcomeKind.RETRIED, 1, "E: x"),
        (OutcomeKind.COMPLETED, 2, None),
    ]
    assert [e.id for e in detail.journal] == sorted(e.id for e in detail.journal)
    assert {(e.job_id, e.kind) for e in detail.journal} == {(job.id, KIND)}


# -- list_jobs ------------------------------------------------------------------------


def test_list_jobs_pages_newest_first_and_each_row_once(backend: Backend) -> None:
    jobs = [new_job() for _ in range(7)]
    backend.enqueue(jobs)

    pages = all_pages(backend, limit=3)

    assert pages == [[j.id for j in reversed(jobs)][i : i + 3] for i in (0, 3, 6)]


def test_a_full_last_page_is_followed_by_an_empty_one(backend: Backend) -> None:
    jobs = [new_job() for _ in range(4)]
    backend.enqueue(jobs)

    assert all_pages(backend, limit=2) == [[jobs[3].id, jobs[2].id], [jobs[1].id, jobs[0].id], []]


def test_list_jobs_filters_by_status_and_kind(backend: Backend, claim_all: ClaimAll) -> None:
    a_pending, a_claimed, b_pending = new_job("contract.a"), new_job("contract.a"), new_job()
    backend.enqueue([a_claimed])
    claim_all(["contract.a"])
    backend.enqueue([a_pending, b_pending])

    assert all_pages(backend, limit=10, kind="contract.a") == [[a_pending.id, a_claimed.id]]
    assert all_pages(backend, limit=10, status=Status.PENDING) == [[b_pending.id, a_pending.id]]
    assert all_pages(backend, limit=1, status=Status.PENDING, kind="contract.a") == [
        [a_pending.id],
        [],
    ]
    assert all_pages(backend, limit=10, status=Status.DEAD) == [[]]


def test_rows_enqueued_while_paging_do_not_appear_on_later_pages(backend: Backend) -> None:
    jobs = [new_job() for _ in range(4)]
    backend.enqueue(jobs)
    first = backend.list_jobs(status=None, kind=None, limit=2, after=None)
    backend.enqueue([new_job()])

    rest = backend.list_jobs(status=None, kind=None, limit=10, after=first.next)

    assert [job.id for job in rest.jobs] == [jobs[1].id, jobs[0].id]
    assert rest.next is None


# -- stats ----------------------------------------------------------------------------


def test_stats_of_an_empty_queue_have_no_kinds(backend: Backend) -> None:
    assert backend.stats().kinds == ()


def test_stats_count_per_kind_and_status_with_scheduled_and_the_oldest_eligible_age(
    backend: Backend, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job("contract.a")])
    claim_all(["contract.a"])
    backend.enqueue([new_job("contract.a"), new_job("contract.a", delay=timedelta(hours=1))])
    backend.enqueue([new_job("contract.b", delay=timedelta(hours=1))])

    stats = {k.kind: k for k in backend.stats().kinds}

    assert set(stats) == {"contract.a", "contract.b"}
    assert dict(stats["contract.a"].counts) == {Status.PENDING: 2, Status.CLAIMED: 1}
    assert dict(stats["contract.b"].counts) == {Status.PENDING: 1}
    assert (stats["contract.a"].scheduled, stats["contract.b"].scheduled) == (1, 1)
    age = stats["contract.a"].oldest_eligible_age
    assert age is not None and timedelta(0) <= age < timedelta(minutes=1)
    assert stats["contract.b"].oldest_eligible_age is None


# -- backlog (ADR 0136) ----------------------------------------------------------------


def test_the_backlog_counts_due_pending_jobs_of_every_kind_or_of_one(
    backend: Backend, claim_all: ClaimAll
) -> None:
    assert backend.backlog(None) == 0
    backend.enqueue([new_job("contract.a")])
    claim_all(["contract.a"])  # claimed: no longer waiting
    backend.enqueue([new_job("contract.a"), new_job("contract.a"), new_job("contract.b")])
    backend.enqueue([new_job("contract.b", delay=timedelta(hours=1))])  # not due yet
    ended(backend, claim_all, OutcomeKind.COMPLETED)

    assert backend.backlog(None) == 3
    assert (backend.backlog("contract.a"), backend.backlog("contract.b")) == (2, 1)
    assert backend.backlog("contract.none") == 0


# -- list_job_summaries ----------------------------------------------------------------


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
