"""Operations through the App against real PostgreSQL (ADR 5, ADR 18).

Listing and pagination, the per-job timeline, retry and cancel, cleanup and
stats. Rows in states a worker would produce (claimed, completed, dead) are
written by hand with ``db``, so each test states exactly the data it reads.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from support import row
from ulid import ULID

import venturi
from venturi.errors import InvalidState, JobNotFound
from venturi.types import Cursor, JobRow, OutcomeKind, Status


def insert_job(
    db: Any,
    *,
    kind: str = "ops.a",
    status: str = "pending",
    age: timedelta = timedelta(0),
    visible_in: timedelta = timedelta(0),
    finished_ago: timedelta | None = None,
) -> str:
    """One row as a worker would have left it; ``age`` moves created_at (and visible_at) back."""
    job_id = str(ULID())
    if status in ("completed", "dead") and finished_ago is None:
        finished_ago = timedelta(0)
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at,
                                     claimed_by, claim_expires_at, finished_at,
                                     run_count, failure_count)
        VALUES (%(id)s, %(kind)s, '{"n": 1}', %(status)s, now() - %(age)s,
                now() - %(age)s + %(visible_in)s,
                CASE WHEN %(status)s = 'claimed' THEN 'test-host:1' END,
                CASE WHEN %(status)s = 'claimed' THEN now() + interval '5 minutes' END,
                now() - %(finished_ago)s::interval,
                CASE WHEN %(status)s = 'pending' THEN 0 ELSE 1 END,
                CASE WHEN %(status)s = 'dead' THEN 1 ELSE 0 END)
        """,
        {
            "id": job_id,
            "kind": kind,
            "status": status,
            "age": age,
            "visible_in": visible_in,
            "finished_ago": finished_ago,
        },
    )
    return job_id


def insert_entry(
    db: Any, job_id: str, outcome: str, *, recorded_ago: timedelta = timedelta(0), note: str = ""
) -> int:
    entry_id: int = db.scalar(
        """
        INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)
        SELECT id, kind, greatest(run_count, 1), now() - %(ago)s, %(outcome)s, %(note)s
        FROM {{prefix}}_jobs WHERE id = %(job_id)s
        RETURNING id
        """,
        {"job_id": job_id, "outcome": outcome, "ago": recorded_ago, "note": note or None},
    )
    return entry_id


def all_pages(app: venturi.App, **filters: Any) -> list[JobRow]:
    jobs: list[JobRow] = []
    cursor: Cursor | None = None
    while True:
        page = app.jobs(after=cursor, **filters)
        jobs.extend(page.jobs)
        if page.next is None:
            return jobs
        cursor = page.next


# ------------------------------------------------------------------- listing


def test_paging_through_1000_jobs_returns_each_once_newest_first_while_new_jobs_arrive(
    app: venturi.App, db: Any
) -> None:
    ids = [str(ULID()) for _ in range(1000)]
    # Ten rows share each created_at, so the id tiebreak of the keyset is exercised too.
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)
        SELECT u.id, 'ops.page', '{}', 'pending', t, t
        FROM unnest(%s::text[]) WITH ORDINALITY AS u(id, i),
             LATERAL (SELECT now() - interval '1 hour' + (u.i / 10) * interval '1 ms' AS t) AS c
        """,
        (ids,),
    )
    newest_first = [
        r["id"] for r in db.all("SELECT id FROM {{prefix}}_jobs ORDER BY created_at DESC, id DESC")
    ]

    @app.task(kind="ops.page")
    def page_job() -> None: ...

    seen: list[str] = []
    arrived: list[str] = []
    cursor: Cursor | None = None
    pages = 0
    while True:
        page = app.jobs(limit=100, after=cursor)
        pages += 1
        seen.extend(job.id for job in page.jobs)
        if page.next is None:
            break
        cursor = page.next
        arrived.append(page_job.delay().id)  # newer than every listed row: must not show up

    assert seen == newest_first
    assert pages <= 11
    assert len(arrived) >= 9
    first = app.jobs(limit=len(arrived)).jobs
    assert [job.id for job in first] == list(reversed(arrived))


def test_listing_filters_by_status_and_kind_and_pages_within_the_filter(
    app: venturi.App, db: Any
) -> None:
    made: dict[tuple[str, str], list[str]] = {}
    for kind in ("ops.a", "ops.b"):
        for status in ("pending", "claimed", "completed", "dead"):
            made[(kind, status)] = [
                insert_job(db, kind=kind, status=status, age=timedelta(minutes=n)) for n in range(3)
            ]

    dead_a = all_pages(app, status=Status.DEAD, kind="ops.a", limit=2)
    assert [job.id for job in dead_a] == made[
        ("ops.a", "dead")
    ]  # age 0, 1, 2 minutes: newest first
    assert {job.status for job in dead_a} == {Status.DEAD}

    claimed = all_pages(app, status="claimed", limit=4)
    assert sorted(job.id for job in claimed) == sorted(
        made[("ops.a", "claimed")] + made[("ops.b", "claimed")]
    )

    kind_b = all_pages(app, kind="ops.b", limit=5)
    assert sorted(job.id for job in kind_b) == sorted(
        i for (k, _), ids in made.items() if k == "ops.b" for i in ids
    )

    assert app.jobs(kind="ops.none").jobs == ()
    assert app.jobs(kind="ops.none").next is None


def test_a_listed_job_carries_the_columns_of_its_row(app: venturi.App, db: Any) -> None:
    job_id = insert_job(db, kind="ops.a", status="dead", finished_ago=timedelta(hours=1))
    [job] = app.jobs().jobs
    stored = row(db, job_id)
    assert (job.id, job.kind, job.status, job.payload) == (job_id, "ops.a", Status.DEAD, {"n": 1})
    assert (job.created_at, job.finished_at) == (stored["created_at"], stored["finished_at"])
    assert (job.run_count, job.failure_count) == (1, 1)


# ------------------------------------------------------------------ timeline


def test_a_job_timeline_is_its_journal_in_id_order_even_when_clocks_disagree(
    app: venturi.App, db: Any
) -> None:
    job_id = insert_job(db, status="dead")
    other = insert_job(db, status="completed")
    written = [
        insert_entry(
            db, job_id, "retried", recorded_ago=timedelta(minutes=1), note="ValueError: x"
        ),
        insert_entry(db, other, "completed"),
        insert_entry(db, job_id, "stale-recovered", recorded_ago=timedelta(minutes=5)),
        insert_entry(db, job_id, "dead", recorded_ago=timedelta(minutes=3), note="Fail: no"),
    ]

    detail = app.job(job_id)

    assert detail.job.id == job_id
    assert [entry.id for entry in detail.journal] == [written[0], written[2], written[3]]
    assert [entry.outcome for entry in detail.journal] == [
        OutcomeKind.RETRIED,
        OutcomeKind.STALE_RECOVERED,
        OutcomeKind.DEAD,
    ]
    assert [entry.note for entry in detail.journal] == ["ValueError: x", None, "Fail: no"]
    assert {entry.job_id for entry in detail.journal} == {job_id}


def test_a_job_without_journal_entries_has_an_empty_timeline(app: venturi.App, db: Any) -> None:
    assert app.job(insert_job(db)).journal == ()


# -------------------------------------------------------------- retry/cancel


def test_cancel_turns_a_pending_job_dead_with_a_cancelled_journal_entry(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="ops.cancel")
    def later(n: int) -> None: ...

    job_id = later.apply_async(kwargs={"n": 1}, countdown=3600).id  # scheduled work is pending too

    cancelled = app.cancel(job_id)

    stored = row(db, job_id)
    assert cancelled.status == Status.DEAD
    assert stored["status"] == "dead"
    assert stored["finished_at"] is not None
    assert cancelled.finished_at == stored["finished_at"]
    [entry] = db.journal(job_id)
    assert (entry["outcome"], entry["note"], entry["kind"]) == ("dead", "cancelled", "ops.cancel")
    assert app.job(job_id).journal[-1].note == "cancelled"


def test_retry_makes_a_dead_job_pending_and_claimable_now(app: venturi.App, db: Any) -> None:
    job_id = insert_job(db, status="dead", finished_ago=timedelta(days=30))
    db.execute(
        "UPDATE {{prefix}}_jobs SET visible_at = now() + interval '1 day' WHERE id = %s", (job_id,)
    )

    retried = app.retry(job_id)

    stored = row(db, job_id)
    assert retried.status == Status.PENDING
    assert stored["status"] == "pending"
    assert db.scalar("SELECT visible_at <= now() FROM {{prefix}}_jobs WHERE id = %s", (job_id,))
    assert stored["finished_at"] is None, "finished_at belongs to terminal rows only (ADR 5)"
    assert (stored["claimed_by"], stored["claim_expires_at"]) == (None, None)
    claimed = app.backend.claim(
        kinds=["ops.a"], limit=5, worker_id="test:1", lease=timedelta(minutes=1)
    )
    assert [job.claim.job_id for job in claimed] == [job_id]


def test_a_retried_job_is_not_removed_by_cleanup_of_old_finished_jobs(
    app: venturi.App, db: Any
) -> None:
    job_id = insert_job(db, status="dead", finished_ago=timedelta(days=30))
    app.retry(job_id)

    assert app.cleanup(older_than=timedelta(days=7)) == 0
    assert row(db, job_id)["status"] == "pending"


def test_cancel_then_retry_shows_in_the_timeline_and_the_listing(app: venturi.App, db: Any) -> None:
    job_id = insert_job(db)
    app.cancel(job_id)
    app.retry(job_id)

    timeline = app.job(job_id).journal
    assert [(e.id, e.outcome.value, e.note) for e in timeline] == [
        (e["id"], e["outcome"], e["note"]) for e in db.journal(job_id)
    ]
    assert (timeline[0].outcome, timeline[0].note) == (OutcomeKind.DEAD, "cancelled")
    assert [job.id for job in app.jobs(status="pending").jobs] == [job_id]


@pytest.mark.parametrize("status", ["pending", "claimed", "completed"])
def test_only_dead_jobs_can_be_retried(app: venturi.App, db: Any, status: str) -> None:
    job_id = insert_job(db, status=status)
    before = row(db, job_id)

    with pytest.raises(InvalidState) as raised:
        app.retry(job_id)

    assert raised.value.status == status
    assert row(db, job_id) == before
    assert db.journal(job_id) == []


# A claimed job's cancellation is a request (ADR 0121): test_worker_run_control.py.
@pytest.mark.parametrize("status", ["completed", "dead"])
def test_only_pending_or_claimed_jobs_can_be_cancelled(
    app: venturi.App, db: Any, status: str
) -> None:
    job_id = insert_job(db, status=status)
    before = row(db, job_id)

    with pytest.raises(InvalidState) as raised:
        app.cancel(job_id)

    assert raised.value.status == status
    assert row(db, job_id) == before
    assert db.journal(job_id) == []


@pytest.mark.parametrize("operation", ["job", "retry", "cancel"])
def test_an_unknown_job_id_raises_job_not_found(app: venturi.App, db: Any, operation: str) -> None:
    insert_job(db)
    unknown = str(ULID())
    with pytest.raises(JobNotFound) as raised:
        getattr(app, operation)(unknown)
    assert raised.value.job_id == unknown


# ------------------------------------------------------------------- cleanup


@pytest.fixture
def aged_jobs(db: Any) -> dict[str, str]:
    """Every lifecycle state, old and recent, each with a journal entry."""
    month, week, day = timedelta(days=30), timedelta(days=7), timedelta(days=1)
    jobs = {
        "pending": insert_job(db, status="pending", age=month),
        "scheduled": insert_job(db, status="pending", age=month, visible_in=timedelta(days=60)),
        "claimed": insert_job(db, status="claimed", age=month),
        "old completed": insert_job(db, status="completed", age=month, finished_ago=week + day),
        "new completed": insert_job(db, status="completed", age=month, finished_ago=day),
        "old dead": insert_job(db, status="dead", age=month, finished_ago=month),
        "new dead": insert_job(db, status="dead", age=month, finished_ago=day),
    }
    for job_id in jobs.values():
        insert_entry(db, job_id, "released")
    return jobs


def surviving(db: Any, jobs: dict[str, str]) -> set[str]:
    ids = {r["id"] for r in db.all("SELECT id FROM {{prefix}}_jobs")}
    return {name for name, job_id in jobs.items() if job_id in ids}


def journaled(db: Any, jobs: dict[str, str]) -> set[str]:
    ids = {r["job_id"] for r in db.journal()}
    return {name for name, job_id in jobs.items() if job_id in ids}


def test_cleanup_deletes_terminal_jobs_finished_before_the_cutoff_and_their_journals(
    app: venturi.App, db: Any, aged_jobs: dict[str, str]
) -> None:
    assert app.cleanup(older_than=timedelta(days=7)) == 2

    kept = {"pending", "scheduled", "claimed", "new completed", "new dead"}
    assert surviving(db, aged_jobs) == kept
    assert journaled(db, aged_jobs) == kept


@pytest.mark.parametrize(
    ("status", "deleted"), [("completed", "old completed"), (Status.DEAD, "old dead")]
)
def test_cleanup_of_one_status_leaves_the_other(
    app: venturi.App, db: Any, aged_jobs: dict[str, str], status: str, deleted: str
) -> None:
    assert app.cleanup(older_than=timedelta(days=7), status=status) == 1

    assert surviving(db, aged_jobs) == set(aged_jobs) - {deleted}
    assert journaled(db, aged_jobs) == set(aged_jobs) - {deleted}


def test_cleanup_never_deletes_pending_or_claimed_jobs_however_old(
    app: venturi.App, db: Any, aged_jobs: dict[str, str]
) -> None:
    assert app.cleanup(older_than=timedelta(0)) == 4
    assert surviving(db, aged_jobs) == {"pending", "scheduled", "claimed"}


def test_cleanup_works_through_more_rows_than_one_batch(app: venturi.App, db: Any) -> None:
    old = [insert_job(db, status="completed", finished_ago=timedelta(days=10)) for _ in range(25)]
    for job_id in old:
        insert_entry(db, job_id, "completed")
    recent = insert_job(db, status="completed", finished_ago=timedelta(hours=1))

    assert app.cleanup(older_than=timedelta(days=7), batch_size=10) == 25

    assert [r["id"] for r in db.jobs()] == [recent]
    assert db.journal() == []
    assert app.cleanup(older_than=timedelta(days=7), batch_size=10) == 0


# --------------------------------------------------------------------- stats


def test_stats_count_jobs_per_kind_and_status(app: venturi.App, db: Any) -> None:
    for status, n in (("pending", 2), ("claimed", 1), ("completed", 3)):
        for _ in range(n):
            insert_job(db, kind="ops.a", status=status)
    insert_job(db, kind="ops.a", status="pending", age=timedelta(hours=1))
    insert_job(db, kind="ops.a", status="pending", visible_in=timedelta(hours=2))
    insert_job(db, kind="ops.b", status="dead")
    insert_job(db, kind="ops.c", status="pending", visible_in=timedelta(minutes=5))

    stats = app.stats()

    by_kind = {k.kind: k for k in stats.kinds}
    assert set(by_kind) == {"ops.a", "ops.b", "ops.c"}
    counts = {kind: {s: k.counts.get(s, 0) for s in Status} for kind, k in by_kind.items()}
    assert counts["ops.a"] == {
        Status.PENDING: 4,
        Status.CLAIMED: 1,
        Status.COMPLETED: 3,
        Status.DEAD: 0,
    }
    assert counts["ops.b"] == {
        Status.PENDING: 0,
        Status.CLAIMED: 0,
        Status.COMPLETED: 0,
        Status.DEAD: 1,
    }
    assert counts["ops.c"] == {
        Status.PENDING: 1,
        Status.CLAIMED: 0,
        Status.COMPLETED: 0,
        Status.DEAD: 0,
    }
    assert [by_kind[k].scheduled for k in ("ops.a", "ops.b", "ops.c")] == [1, 0, 1]

    oldest = by_kind["ops.a"].oldest_eligible_age
    assert oldest is not None
    assert timedelta(hours=1) <= oldest < timedelta(hours=2)
    assert by_kind["ops.b"].oldest_eligible_age is None, "nothing pending"
    assert by_kind["ops.c"].oldest_eligible_age is None, "pending, but not yet eligible"
    assert stats.oldest_eligible_age == oldest


def test_stats_of_an_empty_queue_have_no_kinds(app: venturi.App) -> None:
    stats = app.stats()
    assert stats.kinds == ()
    assert stats.oldest_eligible_age is None
