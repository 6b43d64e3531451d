"""The Enqueue role (venturi/backend/): ``enqueue``'s rows, order, batches of every
size, dedup decisions and the caller's transaction; trace headers, fair keys and
expiries stored on every insert path (and an expiry through merges); beat's two reads by
dedup key (ADR 10, 12, 0108, 0127, 0129, 0135). ``aenqueue`` has
test_backend_enqueue_async.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from backends import KIND, BackendCase, ClaimAll, new_job
from ulid import ULID

from venturi.backend import Backend
from venturi.refs import JobRef
from venturi.types import (
    Finished,
    JobRow,
    MergeAction,
    MergeDecision,
    NewJob,
    Outcome,
    OutcomeKind,
    Priority,
    Status,
)

# -- rows, order, batches --------------------------------------------------------------


def test_one_job_becomes_one_pending_row_visible_from_its_enqueue_time(
    backend: Backend, db: Any
) -> None:
    job = new_job("contract.kind", '{"to": "a@x.org"}', priority=Priority.HIGH)

    assert backend.enqueue([job]) == [JobRef(job.id)]

    [row] = db.jobs()
    assert (row["id"], row["kind"], row["payload"], row["priority"], row["status"]) == (
        job.id,
        "contract.kind",
        {"to": "a@x.org"},
        0,
        "pending",
    )
    assert row["visible_at"] == row["created_at"]
    assert (row["run_count"], row["failure_count"], row["dedup_key"]) == (0, 0, None)
    assert db.journal() == []


def test_a_delay_or_an_eta_sets_visibility(backend: Backend, db: Any) -> None:
    delayed = new_job(delay=timedelta(minutes=5))
    eta = datetime(2031, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    scheduled = NewJob(str(ULID()), "contract.kind", "{}", eta=eta)

    backend.enqueue([delayed, scheduled])

    rows = {row["id"]: row for row in db.jobs()}
    assert rows[delayed.id]["visible_at"] - rows[delayed.id]["created_at"] == timedelta(minutes=5)
    assert rows[scheduled.id]["visible_at"] == eta


def test_a_batch_returns_one_ref_per_job_in_order_and_keeps_that_order(
    backend: Backend, db: Any
) -> None:
    jobs = [new_job(payload=json.dumps({"n": n})) for n in range(7)]

    refs = backend.enqueue(jobs)

    assert refs == [JobRef(job.id) for job in jobs]
    assert [row["id"] for row in db.jobs()] == [job.id for job in jobs]


def test_an_empty_batch_writes_nothing(backend: Backend, db: Any) -> None:
    assert backend.enqueue([]) == []
    assert db.jobs() == []


def test_a_large_batch_keeps_order_delays_etas_and_tiers(
    backend: Backend, backend_case: BackendCase, db: Any
) -> None:
    eta = datetime(2030, 1, 1, tzinfo=UTC)
    jobs = [
        NewJob(
            str(ULID()),
            "bulk.item",
            json.dumps({"n": n}),
            delay=timedelta(seconds=60) if n % 3 == 1 else timedelta(0),
            eta=eta if n % 3 == 2 else None,
            priority=Priority.HIGH if n % 2 else Priority.LOW,
        )
        for n in range(backend_case.large_batch)
    ]

    refs = backend.enqueue(jobs)

    assert [r.id for r in refs] == [j.id for j in jobs]
    rows = {r["id"]: r for r in db.jobs()}
    assert len(rows) == len(jobs)
    created = [rows[j.id]["created_at"] for j in jobs]
    assert created == sorted(created) and len(set(created)) == len(created)
    for n, job in enumerate(jobs):
        row = rows[job.id]
        assert row["payload"] == {"n": n}
        assert row["status"] == "pending"
        assert row["priority"] == (0 if n % 2 else 2)
        if n % 3 == 1:
            assert row["visible_at"] - row["created_at"] == timedelta(seconds=60)
        elif n % 3 == 2:
            assert row["visible_at"] == eta
        else:
            assert row["visible_at"] == row["created_at"]


# -- dedup (ADR 10) -------------------------------------------------------------------


def decide(action: MergeAction, payload: str | None = None) -> Callable[[Any], MergeDecision]:
    return lambda existing: MergeDecision(action, payload)


KEEP = decide(MergeAction.KEEP)


def test_a_dedup_key_without_a_sibling_inserts_a_row_with_that_key(
    backend: Backend, db: Any
) -> None:
    job = new_job(dedup_key="k")
    assert backend.enqueue([job]) == [JobRef(job.id)]
    assert [(row["id"], row["dedup_key"]) for row in db.jobs()] == [(job.id, "k")]


def test_keep_drops_the_incoming_job_and_returns_the_siblings_id(backend: Backend, db: Any) -> None:
    first = new_job(payload='{"n": 1}', dedup_key="k")
    backend.enqueue([first])

    second = new_job(payload='{"n": 2}', dedup_key="k", merge=KEEP)
    assert backend.enqueue([second]) == [JobRef(first.id, merged=True)]

    [row] = db.jobs()
    assert (row["id"], row["payload"]) == (first.id, {"n": 1})
    [entry] = db.journal(first.id)
    assert (entry["outcome"], entry["run_no"]) == ("merged", 0)
    assert entry["note"] == f"keep: absorbed {second.id}"


@pytest.mark.parametrize("action", [MergeAction.REPLACE, MergeAction.COMBINE])
def test_replace_and_combine_give_the_sibling_the_decided_payload_and_the_higher_tier(
    backend: Backend, db: Any, action: MergeAction
) -> None:
    first = new_job(payload='{"n": 1}', dedup_key="k", delay=timedelta(minutes=1))
    backend.enqueue([first])
    [before] = db.jobs()

    seen: list[Any] = []

    def merge(existing: Any) -> MergeDecision:
        seen.append(existing)
        return MergeDecision(action, '{"n": 3}')

    second = new_job(payload='{"n": 2}', dedup_key="k", priority=Priority.HIGH, merge=merge)
    assert backend.enqueue([second]) == [JobRef(first.id, merged=True)]

    assert seen == [{"n": 1}]
    [row] = db.jobs()
    assert (row["id"], row["payload"], row["priority"]) == (first.id, {"n": 3}, 0)
    assert (row["created_at"], row["visible_at"]) == (before["created_at"], before["visible_at"])
    assert [e["outcome"] for e in db.journal(first.id)] == ["merged"]


@pytest.mark.parametrize(
    "merge", [decide(MergeAction.INDEPENDENT), None], ids=["independent", "no-resolver"]
)
def test_independent_inserts_a_row_of_its_own(backend: Backend, db: Any, merge: Any) -> None:
    first = new_job(dedup_key="k")
    backend.enqueue([first])
    second = new_job(dedup_key="k", merge=merge)

    assert backend.enqueue([second]) == [JobRef(second.id)]

    assert [row["id"] for row in db.jobs()] == [first.id, second.id]
    assert db.journal() == []


def test_only_the_oldest_pending_row_of_the_same_kind_and_key_is_a_sibling(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    claimed = new_job(dedup_key="k")
    backend.enqueue([claimed])
    claim_all()
    oldest = new_job(dedup_key="k")
    assert backend.enqueue([oldest]) == [JobRef(oldest.id)]  # a claimed row is no sibling
    newer = new_job(dedup_key="k", merge=decide(MergeAction.INDEPENDENT))
    other_kind = new_job("contract.other", dedup_key="k")
    assert backend.enqueue([newer, other_kind]) == [JobRef(newer.id), JobRef(other_kind.id)]

    incoming = new_job(dedup_key="k", merge=KEEP)
    assert backend.enqueue([incoming]) == [JobRef(oldest.id, merged=True)]
    assert [e["job_id"] for e in db.journal()] == [oldest.id]


def test_a_batch_mixing_plain_and_deduplicated_jobs_returns_refs_in_input_order(
    backend: Backend,
) -> None:
    existing = new_job(dedup_key="k")
    backend.enqueue([existing])
    plain, merged = new_job(), new_job(dedup_key="k", merge=KEEP)
    fresh = new_job(dedup_key="new", merge=KEEP)

    refs = backend.enqueue([merged, plain, fresh])

    assert refs == [JobRef(existing.id, merged=True), JobRef(plain.id), JobRef(fresh.id)]


def test_a_failing_merge_resolver_propagates_and_writes_nothing_of_the_batch(
    backend: Backend, db: Any
) -> None:
    existing = new_job(dedup_key="k")
    backend.enqueue([existing])

    def merge(existing: Any) -> MergeDecision:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        backend.enqueue([new_job(), new_job(dedup_key="k", merge=merge)])

    assert [row["id"] for row in db.jobs()] == [existing.id]
    assert db.journal() == []


# -- the caller's transaction -----------------------------------------------------------


def batch_sizes(case: BackendCase) -> list[int]:
    return [1, 3, case.large_batch]


@pytest.mark.parametrize("size", ["one", "few", "large"])
def test_enqueue_inside_a_rolled_back_transaction_leaves_nothing_and_wakes_nobody(
    backend: Backend,
    backend_case: BackendCase,
    database_url: str,
    db: Any,
    size: str,
) -> None:
    count = dict(zip(["one", "few", "large"], batch_sizes(backend_case), strict=True))[size]
    listener = backend.listen()
    try:
        listener.wait(0)
        with psycopg.connect(database_url) as conn:
            backend.enqueue([new_job() for _ in range(count)], connection=conn)
            assert conn.execute(db._sql("SELECT count(*) FROM {{prefix}}_jobs")).fetchone() == (
                count,
            )
            assert db.jobs() == []  # not visible outside the transaction
            conn.rollback()

        assert db.jobs() == []
        assert not listener.wait(0.5)
    finally:
        listener.close()


@pytest.mark.parametrize("size", ["one", "few", "large"])
def test_enqueue_inside_a_committed_transaction_writes_the_rows_and_wakes_at_commit(
    backend: Backend,
    backend_case: BackendCase,
    database_url: str,
    db: Any,
    size: str,
) -> None:
    count = dict(zip(["one", "few", "large"], batch_sizes(backend_case), strict=True))[size]
    listener = backend.listen()
    try:
        listener.wait(0)
        with psycopg.connect(database_url) as conn:
            jobs = [new_job() for _ in range(count)]
            backend.enqueue(jobs, connection=conn)
            assert not listener.wait(0.2)  # the wake-up is delivered at commit
            conn.commit()

        assert [row["id"] for row in db.jobs()] == [job.id for job in jobs]
        assert listener.wait(5.0)
    finally:
        listener.close()


def test_a_deduplicated_enqueue_inside_a_rolled_back_transaction_leaves_no_merge(
    backend: Backend, database_url: str, db: Any
) -> None:
    existing = new_job(dedup_key="k")
    backend.enqueue([existing])

    with psycopg.connect(database_url) as conn:
        refs = backend.enqueue(
            [new_job(dedup_key="k", merge=KEEP), new_job(dedup_key="j", merge=KEEP)],
            connection=conn,
        )
        assert refs[0] == JobRef(existing.id, merged=True)
        conn.rollback()

    assert [row["id"] for row in db.jobs()] == [existing.id]
    assert db.journal() == []


# -- trace headers (ADR 0127) ----------------------------------------------------------


HEADERS = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


def sizes(case: BackendCase) -> list[int]:
    return [1, 3, case.large_batch]


@pytest.mark.parametrize("size_index", [0, 1, 2])
@pytest.mark.parametrize("is_async", [False, True], ids=["enqueue", "aenqueue"])
def test_headers_are_stored_and_claimed_back(
    backend: Backend,
    backend_case: BackendCase,
    claim_all: ClaimAll,
    size_index: int,
    is_async: bool,
) -> None:
    size = sizes(backend_case)[size_index]
    jobs = [replace(new_job(), headers=HEADERS) for _ in range(size)]
    if size > 1:
        jobs[-1] = new_job()  # one without, in the same batch
    if is_async:

        async def write() -> None:
            await backend.aenqueue(jobs)
            await backend.aclose()

        asyncio.run(write())
    else:
        backend.enqueue(jobs)
    claimed = {job.claim.job_id: job.headers for job in claim_all(limit=size)}
    expected = {job.id: job.headers for job in jobs}
    assert claimed == expected


def test_a_deduplicated_job_keeps_its_headers(
    backend: Backend, claim_all: ClaimAll, db: Any
) -> None:
    [ref] = backend.enqueue([replace(new_job(dedup_key="k"), headers=HEADERS)])
    [job] = claim_all()
    assert job.claim.job_id == ref.id
    assert job.headers == HEADERS
    assert db.one("SELECT headers FROM {{prefix}}_jobs WHERE id = %s", (ref.id,)) == {
        "headers": HEADERS
    }


# -- fair keys (ADR 0129) --------------------------------------------------------------


def test_every_enqueue_path_stores_the_fair_key(
    backend: Backend, backend_case: BackendCase, db: Any
) -> None:
    """enqueue_job, enqueue_jobs, COPY, and their forms with trace headers (ADR 0127)."""
    headers = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    single = new_job(fair_key="single")
    batch = [new_job(fair_key=f"batch-{i}") for i in range(3)]
    large = [new_job(fair_key=f"large-{i % 7}") for i in range(backend_case.large_batch)]
    traced_single = new_job(fair_key="traced-single")
    traced_batch = [new_job(fair_key="traced-batch"), new_job()]
    traced_large = [new_job(fair_key="traced-large") for _ in range(backend_case.large_batch)]
    backend.enqueue([single])
    backend.enqueue(batch)
    backend.enqueue(large)
    for jobs in ([traced_single], traced_batch, traced_large):
        backend.enqueue([replace(job, headers=headers) for job in jobs])

    stored = {row["id"]: row for row in db.all("SELECT id, fair_key, headers FROM {{prefix}}_jobs")}

    every = [single, *batch, *large, traced_single, *traced_batch, *traced_large]
    assert {j.id: stored[j.id]["fair_key"] for j in every} == {j.id: j.fair_key for j in every}
    assert stored[traced_large[-1].id]["headers"] == headers


# -- expiry (ADR 0135) -----------------------------------------------------------------


AT = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def _expiring_jobs(count: int) -> list[NewJob]:
    """Jobs expiring in every way a NewJob can: an interval, one beside a delay, a time, none."""
    shapes = [
        new_job(expires_in=timedelta(minutes=3)),
        new_job(expires_at=AT),
        new_job(expires_in=timedelta(seconds=90), delay=timedelta(hours=1)),
        new_job(),
    ]
    return [replace(shapes[n % len(shapes)], id=str(ULID())) for n in range(count)]


@pytest.mark.parametrize("size_index", [0, 1, 2])
@pytest.mark.parametrize("traced", [False, True], ids=["plain", "headers"])
@pytest.mark.parametrize("is_async", [False, True], ids=["enqueue", "aenqueue"])
def test_every_enqueue_path_stores_the_expiry_from_the_database_clock(
    backend: Backend,
    backend_case: BackendCase,
    db: Any,
    size_index: int,
    traced: bool,
    is_async: bool,
) -> None:
    """enqueue_job, enqueue_jobs, COPY, their forms with trace headers, sync and async: an
    interval counts from the row's created_at, a time is stored as given, none is NULL."""
    jobs = _expiring_jobs(sizes(backend_case)[size_index])
    if traced:
        jobs = [replace(job, headers=HEADERS) for job in jobs]
    if is_async:

        async def write() -> None:
            await backend.aenqueue(jobs)
            await backend.aclose()

        asyncio.run(write())
    else:
        backend.enqueue(jobs)

    rows = {r["id"]: r for r in db.jobs()}
    assert len(rows) == len(jobs)
    for job in jobs:
        row = rows[job.id]
        if job.expires_in is not None:
            assert row["expires_at"] - row["created_at"] == job.expires_in
        else:
            assert row["expires_at"] == job.expires_at


LATER = timedelta(days=365 * 20)
MERGES = [
    pytest.param(AT, LATER, "incoming", id="the-later-incoming-one"),
    pytest.param(AT, timedelta(minutes=1), "existing", id="the-later-existing-one"),
    pytest.param(AT, None, None, id="an-incoming-job-without-one-never-expires"),
    pytest.param(None, timedelta(minutes=1), None, id="an-existing-job-without-one-never-expires"),
]


@pytest.mark.parametrize("action", [MergeAction.KEEP, MergeAction.REPLACE, MergeAction.COMBINE])
@pytest.mark.parametrize(("existing", "incoming", "kept"), MERGES)
def test_a_merge_leaves_the_sibling_the_later_expiry(
    backend: Backend,
    db: Any,
    action: MergeAction,
    existing: datetime | None,
    incoming: timedelta | None,
    kept: str | None,
) -> None:
    first = new_job(dedup_key="k", expires_at=existing)
    backend.enqueue([first])
    second = new_job(dedup_key="k", merge=decide(action, '{"n": 2}'), expires_in=incoming)

    assert backend.enqueue([second]) == [JobRef(first.id, merged=True)]

    [row] = db.jobs()
    if kept == "incoming":
        [merged] = db.journal(first.id)
        assert abs(row["expires_at"] - merged["recorded_at"] - LATER) < timedelta(seconds=5)
    else:
        assert row["expires_at"] == (AT if kept == "existing" else None)


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
