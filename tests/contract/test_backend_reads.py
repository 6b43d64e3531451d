"""Reading rows back: get_job, list_jobs, stats, and beat's two dedup-key lookups
(ADR 18, 0108; the contract in venturi/backend.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from backends import KIND, ClaimAll, new_job
from ulid import ULID

from venturi.backend import Backend
from venturi.types import Cursor, Finished, JobRow, Outcome, OutcomeKind, Priority, Status


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


# -- beat's lookups (ADR 0108) ----------------------------------------------------------


def test_pending_with_dedup_prefix_finds_only_pending_rows_whose_key_starts_with_it(
    backend: Backend, claim_all: ClaimAll
) -> None:
    claimed = new_job("contract.a", dedup_key="beat:a")
    backend.enqueue([claimed])
    claim_all(["contract.a"])
    wanted = [new_job("contract.b", dedup_key="beat:b"), new_job(dedup_key="beat:c:1")]
    others = [new_job(dedup_key="xbeat:d"), new_job(dedup_key="beat_e"), new_job()]
    backend.enqueue(wanted + others)

    found = backend.pending_with_dedup_prefix("beat:")

    assert sorted(row.id for row in found) == sorted(job.id for job in wanted)
    assert all(isinstance(row, JobRow) and row.status is Status.PENDING for row in found)
    assert backend.pending_with_dedup_prefix("nothing:") == []


def test_a_dedup_prefix_is_matched_literally_not_as_a_pattern(backend: Backend) -> None:
    literal, lookalike = new_job(dedup_key="a%_b:1"), new_job(dedup_key="axyb:1")
    backend.enqueue([literal, lookalike])

    assert [row.id for row in backend.pending_with_dedup_prefix("a%_b:")] == [literal.id]


def test_latest_with_dedup_key_is_the_row_visible_last_in_any_status(
    backend: Backend, claim_all: ClaimAll
) -> None:
    done = new_job(dedup_key="beat:t")
    backend.enqueue([done])
    [claimed] = claim_all()
    backend.finish([Finished(claimed.claim, Outcome(OutcomeKind.COMPLETED))])
    assert backend.latest_with_dedup_key(KIND, "beat:t") == _row(backend, done.id)

    later = new_job(dedup_key="beat:t", delay=timedelta(hours=2))
    sooner = new_job(dedup_key="beat:t", delay=timedelta(hours=1))
    backend.enqueue([later])
    backend.enqueue([sooner])
    backend.enqueue([new_job("contract.other", dedup_key="beat:t", delay=timedelta(days=1))])

    latest = backend.latest_with_dedup_key(KIND, "beat:t")

    assert latest is not None and latest.id == later.id
    assert backend.latest_with_dedup_key(KIND, "beat:none") is None
    assert backend.latest_with_dedup_key("contract.none", "beat:t") is None


def _row(backend: Backend, job_id: str) -> JobRow:
    detail = backend.get_job(job_id)
    assert detail is not None
    return detail.job
