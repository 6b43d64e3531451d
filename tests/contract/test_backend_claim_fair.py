"""Backend.claim_fair: the keys of a fair kind take turns (ADR 0129; the contract in
venturi/backend.py), and every enqueue path stores the key a task computed."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from backends import KIND, LEASE, WORKER, BackendCase, new_job

from venturi.backend import Backend
from venturi.types import ClaimedJob, Finished, Outcome, OutcomeKind, Priority


def _claim(backend: Backend, limit: int, *, worker_id: str = WORKER) -> list[ClaimedJob]:
    return backend.claim_fair(kind=KIND, limit=limit, worker_id=worker_id, lease=LEASE)


def _keys(db: Any, jobs: list[ClaimedJob]) -> list[str]:
    keys = {
        row["id"]: row["fair_key"]
        for row in db.all(
            "SELECT id, fair_key FROM {{prefix}}_jobs WHERE id = ANY(%s)",
            ([j.claim.job_id for j in jobs],),
        )
    }
    return [keys[j.claim.job_id] for j in jobs]


def _burst_and_single(backend: Backend, burst: int) -> None:
    backend.enqueue([new_job(fair_key="tenant-a") for _ in range(burst)])
    backend.enqueue([new_job(fair_key="tenant-b")])


def test_a_single_job_of_one_key_is_claimed_beside_a_burst_of_another(
    backend: Backend, db: Any
) -> None:
    _burst_and_single(backend, 200)

    first = _claim(backend, 4)

    assert _keys(db, first) == ["tenant-a", "tenant-b", "tenant-a", "tenant-a"]


def test_claims_of_one_job_alternate_between_the_keys(backend: Backend, db: Any) -> None:
    _burst_and_single(backend, 50)
    backend.enqueue([new_job(fair_key="tenant-b")])

    served = [_keys(db, _claim(backend, 1)) for _ in range(6)]

    assert [key for [key] in served] == ["tenant-a", "tenant-b"] * 2 + ["tenant-a"] * 2


def test_the_rotation_goes_through_every_key_before_any_gets_a_second_turn(
    backend: Backend, db: Any
) -> None:
    for key in ("k3", "k1", "k2"):
        backend.enqueue([new_job(fair_key=key) for _ in range(3)])

    served = [_keys(db, _claim(backend, 2)) for _ in range(3)]

    assert served == [["k1", "k2"], ["k3", "k1"], ["k2", "k3"]]


def test_one_key_alone_fills_the_claim_oldest_first(backend: Backend) -> None:
    jobs = [new_job(fair_key="solo") for _ in range(5)]
    backend.enqueue(jobs)

    claimed = _claim(backend, 3)

    assert [j.claim.job_id for j in claimed] == [j.id for j in jobs[:3]]
    assert all(j.claim.run_count == 1 and j.claim.claimed_by == WORKER for j in claimed)


def test_tiers_stay_strict_across_keys(backend: Backend, db: Any) -> None:
    backend.enqueue([new_job(fair_key="bulk") for _ in range(5)])
    backend.enqueue([new_job(fair_key="low", priority=Priority.LOW)])
    backend.enqueue([new_job(fair_key="urgent", priority=Priority.HIGH) for _ in range(2)])

    claimed = _claim(backend, 5)

    assert [j.priority for j in claimed] == [Priority.HIGH] * 2 + [Priority.NORMAL] * 3
    assert _keys(db, claimed) == ["urgent", "urgent", "bulk", "bulk", "bulk"]


def test_jobs_not_yet_visible_are_left_and_their_key_skipped(backend: Backend, db: Any) -> None:
    backend.enqueue([new_job(fair_key="later", delay=timedelta(hours=1)) for _ in range(3)])
    backend.enqueue(
        [new_job(fair_key="scheduled", eta=datetime.now(UTC) + timedelta(hours=1))]
        + [new_job(fair_key="now") for _ in range(2)]
    )

    claimed = _claim(backend, 10)

    assert _keys(db, claimed) == ["now", "now"]


def test_jobs_without_a_key_are_left_to_the_plain_claim(backend: Backend) -> None:
    plain = new_job()
    backend.enqueue([plain, new_job(fair_key="k")])

    assert len(_claim(backend, 10)) == 1
    [claimed] = backend.claim(kinds=[KIND], limit=10, worker_id=WORKER, lease=LEASE)
    assert claimed.claim.job_id == plain.id


def test_released_and_recovered_jobs_keep_their_key_and_are_claimed_again(
    backend: Backend, db: Any
) -> None:
    backend.enqueue([new_job(fair_key="a"), new_job(fair_key="b")])
    released, recovered = _claim(backend, 2)
    assert backend.release([released.claim]) == 1
    db.execute(
        "UPDATE {{prefix}}_jobs SET claim_expires_at = now() - interval '1 second' WHERE id = %s",
        (recovered.claim.job_id,),
    )
    assert backend.recover_stale(max_failures={}, default_max_failures=20, limit=10) == 1

    again = _claim(backend, 2)

    assert sorted(j.claim.job_id for j in again) == sorted(
        [released.claim.job_id, recovered.claim.job_id]
    )
    assert sorted(_keys(db, again)) == ["a", "b"]
    assert {j.claim.run_count for j in again} == {2}
    done = backend.finish([Finished(j.claim, Outcome(OutcomeKind.COMPLETED)) for j in again])
    assert done == {j.claim.job_id for j in again}


def test_two_claimers_at_once_never_take_the_same_job(build_backend: Any, backend: Backend) -> None:
    for key in ("a", "b", "c"):
        backend.enqueue([new_job(fair_key=key) for _ in range(40)])
    others = [build_backend() for _ in range(3)]
    claimed: list[list[str]] = [[] for _ in others]

    def drain(index: int) -> None:
        while jobs := _claim(others[index], 4, worker_id=f"contract-host:{index}"):
            claimed[index].extend(j.claim.job_id for j in jobs)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(others))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    every = [job_id for ids in claimed for job_id in ids]
    assert len(every) == 120
    assert len(set(every)) == 120


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
