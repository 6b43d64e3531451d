"""Backend.claim: tier then age, the kinds filter, limit, horizon, floors, and claimers
that never take one row twice (ADR 3, 19, 0112, 0115; the contract in venturi/backend.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from backends import KIND, LEASE, WORKER, ClaimAll, new_job

from venturi.backend import Backend
from venturi.types import ClaimedJob, ClaimFloor, Priority


def test_claim_takes_the_highest_tier_first_then_the_oldest(
    backend: Backend, claim_all: ClaimAll
) -> None:
    low, normal_old, high, normal_new = (
        new_job(priority=Priority.LOW),
        new_job(),
        new_job(priority=Priority.HIGH),
        new_job(),
    )
    for job in (low, normal_old, high, normal_new):
        backend.enqueue([job])

    claimed = claim_all()

    assert [job.claim.job_id for job in claimed] == [high.id, normal_old.id, normal_new.id, low.id]


def test_a_claimed_job_carries_its_fence_and_its_row_is_claimed_under_a_lease(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    job = new_job(payload='{"n": 1}', priority=Priority.HIGH)
    backend.enqueue([job])

    [claimed] = claim_all(lease=timedelta(minutes=3))

    assert (claimed.claim.job_id, claimed.claim.claimed_by, claimed.claim.run_count) == (
        job.id,
        WORKER,
        1,
    )
    assert (claimed.kind, claimed.payload, claimed.carry) == (KIND, {"n": 1}, None)
    assert (claimed.priority, claimed.failure_count) == (Priority.HIGH, 0)
    row = db.one(
        "SELECT *, claim_expires_at - now() AS lease FROM {{prefix}}_jobs WHERE id = %s", (job.id,)
    )
    assert (row["status"], row["claimed_by"], row["run_count"]) == ("claimed", WORKER, 1)
    assert claimed.created_at == row["created_at"]
    assert claimed.claim_expires_at == row["claim_expires_at"]
    assert timedelta(minutes=2) < row["lease"] <= timedelta(minutes=3)


def test_claim_takes_only_the_kinds_asked_for(backend: Backend, claim_all: ClaimAll) -> None:
    wanted, other = new_job("contract.a"), new_job("contract.b")
    backend.enqueue([wanted, other])

    assert [job.claim.job_id for job in claim_all(["contract.a", "contract.c"])] == [wanted.id]
    assert [job.claim.job_id for job in claim_all(["contract.b"])] == [other.id]


def test_claim_takes_at_most_limit_jobs_and_nothing_for_no_kinds_or_no_room(
    backend: Backend, claim_all: ClaimAll
) -> None:
    jobs = [new_job() for _ in range(5)]
    backend.enqueue(jobs)

    assert claim_all([]) == []
    assert claim_all(limit=0) == []
    assert [job.claim.job_id for job in claim_all(limit=2)] == [j.id for j in jobs[:2]]
    assert [job.claim.job_id for job in claim_all(limit=10)] == [j.id for j in jobs[2:]]
    assert claim_all() == []


def test_a_claimed_row_is_not_claimed_again(backend: Backend, claim_all: ClaimAll) -> None:
    backend.enqueue([new_job()])
    assert len(claim_all()) == 1
    assert claim_all(worker_id="other-host:2") == []


def test_future_rows_wait_unless_inside_the_horizon(backend: Backend) -> None:
    soon, later = new_job(delay=timedelta(minutes=1)), new_job(delay=timedelta(hours=1))
    backend.enqueue([soon, later])

    def claim(horizon: timedelta) -> list[str]:
        jobs = backend.claim(kinds=[KIND], limit=10, worker_id=WORKER, lease=LEASE, horizon=horizon)
        return [job.claim.job_id for job in jobs]

    assert claim(timedelta(0)) == []
    assert claim(timedelta(minutes=5)) == [soon.id]
    assert claim(timedelta(days=1)) == [later.id]


def test_a_claim_with_a_floor_takes_only_rows_at_or_after_it_in_claim_order(
    backend: Backend, db: Any
) -> None:
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at)
        SELECT 'job-' || n, 'floor.kind', jsonb_build_object('n', n), p, 'pending',
               now() - make_interval(secs => 100 - n), now() - make_interval(secs => 100 - n)
        FROM (VALUES (1, 1), (2, 1), (3, 1), (4, 0), (5, 2)) AS v(n, p)
        """
    )
    floor_at = db.scalar("SELECT created_at FROM {{prefix}}_jobs WHERE id = 'job-2'")
    floor = ClaimFloor(priority=1, created_at=floor_at)

    jobs = backend.claim(
        kinds=["floor.kind"], limit=10, worker_id="h:1", lease=LEASE, floors={"floor.kind": floor}
    )

    # job-4 (high tier) and job-1 (older) sort before the floor: left for a floorless claim.
    assert [job.claim.job_id for job in jobs] == ["job-2", "job-3", "job-5"]
    rest = backend.claim(kinds=["floor.kind"], limit=10, worker_id="h:1", lease=LEASE)
    assert [job.claim.job_id for job in rest] == ["job-4", "job-1"]


def test_a_floor_applies_only_to_its_own_kind(backend: Backend) -> None:
    older, newer = new_job("contract.a"), new_job("contract.a")
    other = new_job("contract.b")
    backend.enqueue([older, newer, other])
    jobs = backend.claim(
        kinds=["contract.a"], limit=10, worker_id=WORKER, lease=LEASE
    )  # learn newer's position, then give it back
    backend.release([job.claim for job in jobs])
    floor = ClaimFloor(int(Priority.NORMAL), jobs[1].created_at)

    claimed = backend.claim(
        kinds=["contract.a", "contract.b"],
        limit=10,
        worker_id=WORKER,
        lease=LEASE,
        floors={"contract.a": floor},
    )

    assert [job.claim.job_id for job in claimed] == [newer.id, other.id]


def test_a_row_locked_by_another_transaction_is_skipped_not_waited_for(
    backend: Backend, database_url: str, db: Any
) -> None:
    locked, free = new_job(), new_job()
    backend.enqueue([locked, free])
    claimed: list[ClaimedJob] = []

    with db.conn.transaction():
        db.execute("SELECT 1 FROM {{prefix}}_jobs WHERE id = %s FOR UPDATE", (locked.id,))
        claimer = threading.Thread(
            target=lambda: claimed.extend(
                backend.claim(kinds=[KIND], limit=10, worker_id=WORKER, lease=LEASE)
            )
        )
        claimer.start()
        claimer.join(timeout=10)
        assert not claimer.is_alive(), "the claim waited on a locked row"

    assert [job.claim.job_id for job in claimed] == [free.id]


def test_concurrent_claimers_never_take_one_job_twice_and_together_take_all(
    backend: Backend, build_backend: Callable[[], Backend]
) -> None:
    jobs = [new_job() for _ in range(200)]
    backend.enqueue(jobs)
    claimers = [backend, build_backend(), build_backend()]
    start = threading.Barrier(len(claimers))
    taken: list[list[str]] = [[] for _ in claimers]

    def claim_until_empty(index: int) -> None:
        start.wait(timeout=10)
        while batch := claimers[index].claim(
            kinds=[KIND], limit=7, worker_id=f"h:{index}", lease=LEASE
        ):
            taken[index].extend(job.claim.job_id for job in batch)

    threads = [threading.Thread(target=claim_until_empty, args=(i,)) for i in range(len(claimers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    every = [job_id for ids in taken for job_id in ids]
    assert sorted(every) == sorted(job.id for job in jobs)
    assert len(set(every)) == len(every)
