"""The Claims role (venturi/backend/): ``claim`` (tier then age, kinds, limit,
horizon, floors, claimers that never take one row twice), the runtime's floors against
real claims, ``claim_limited`` (global caps and rate limits shared by every claimer),
``promote_waiting`` (priority aging), ``claim_fair`` (the keys of a fair kind take
turns) and every claim's expiry test (ADR 3, 19, 0112, 0115, 0128, 0129, 0132, 0135)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from backends import KIND, LEASE, WORKER, ClaimAll, new_job

from venturi.backend import CAP_RECHECK, Backend
from venturi.runtime.floors import ClaimFloors
from venturi.types import (
    ClaimedJob,
    ClaimFloor,
    Finished,
    KindLimits,
    LimitedClaim,
    Outcome,
    OutcomeKind,
    Priority,
    RateLimit,
)

# -- claim -----------------------------------------------------------------------------


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


# -- floors against real claims (ADR 0115, 0132) ---------------------------------------


def _floored_claim_jobs(
    backend: Backend, floors: ClaimFloors, *, at: float, took: float
) -> list[ClaimedJob]:
    """One claim of the claim loop's shape: ``current`` at ``at``, ``record`` ``took`` later."""
    used = floors.current(at)
    jobs: list[ClaimedJob] = backend.claim(
        kinds=[KIND], limit=10, worker_id=WORKER, lease=LEASE, floors=used
    )
    floors.record(jobs, used=used, limit=10, now=at + took)
    return jobs


def _floored_claim(backend: Backend, floors: ClaimFloors, *, at: float, took: float) -> list[str]:
    return [job.claim.job_id for job in _floored_claim_jobs(backend, floors, at=at, took=took)]


def test_after_an_expensive_walk_a_released_job_behind_the_floor_is_claimed_after_the_trust_period(
    backend: Backend,
) -> None:
    first, second = new_job(), new_job()
    backend.enqueue([first, second])
    floors = ClaimFloors(refresh=0.1)
    # A 10 ms walk: short claims keep floors, trusted 20 x 10 ms = 0.2 s.
    claimed = _floored_claim_jobs(backend, floors, at=0.0, took=0.01)
    assert [job.claim.job_id for job in claimed] == [first.id, second.id]

    [released] = [job for job in claimed if job.claim.job_id == first.id]
    assert backend.release([released.claim]) == 1
    later = new_job()
    backend.enqueue([later])

    # Within the trust period the claim starts at `second`: `later` is claimed,
    # the released `first` (older, so before the floor) waits ...
    assert _floored_claim(backend, floors, at=0.1, took=0.001) == [later.id]
    assert _floored_claim(backend, floors, at=0.15, took=0.001) == []
    # ... and the first claim after the period walks again and takes it.
    assert _floored_claim(backend, floors, at=0.25, took=0.001) == [first.id]


def test_after_a_cheap_walk_a_short_claim_drops_the_floors_and_order_is_exact(
    backend: Backend,
) -> None:
    first, second = new_job(), new_job()
    backend.enqueue([first, second])
    floors = ClaimFloors(refresh=0.1)
    claimed = _floored_claim_jobs(backend, floors, at=0.0, took=0.0005)

    [released] = [job for job in claimed if job.claim.job_id == first.id]
    assert backend.release([released.claim]) == 1

    assert _floored_claim(backend, floors, at=0.01, took=0.0005) == [first.id]


# -- claim_limited (ADR 0128) ----------------------------------------------------------


FREE = "contract.free"
CAP_2 = {KIND: KindLimits(global_concurrency=2)}
TEN_PER_SECOND = {KIND: KindLimits(rate_limit=RateLimit(10, timedelta(seconds=1)))}


def _limited_claim(
    backend: Backend,
    limits: dict[str, KindLimits],
    *,
    kinds: tuple[str, ...] = (KIND,),
    limit: int = 100,
    worker_id: str = WORKER,
    lease: timedelta = LEASE,
) -> LimitedClaim:
    return backend.claim_limited(
        kinds=kinds, limit=limit, worker_id=worker_id, lease=lease, limits=limits
    )


def test_a_capped_kind_is_claimed_up_to_its_cap_and_then_reported_throttled(
    backend: Backend,
) -> None:
    backend.enqueue([new_job() for _ in range(5)])

    first = _limited_claim(backend, CAP_2)
    second = _limited_claim(backend, CAP_2, worker_id="contract-host:2")

    assert len(first.jobs) == 2
    assert first.throttled == {}
    assert second.jobs == []
    assert second.throttled == {KIND: CAP_RECHECK}


def test_every_way_a_claim_ends_gives_its_slot_back(backend: Backend, db: Any) -> None:
    """Finish, release and stale recovery: the cap counts claimed rows, so none leaks."""
    backend.enqueue([new_job() for _ in range(6)])
    done, released = _limited_claim(backend, CAP_2).jobs

    backend.finish([Finished(done.claim, Outcome(OutcomeKind.COMPLETED))])
    [after_finish] = _limited_claim(backend, CAP_2).jobs
    backend.release([released.claim])
    [after_release] = _limited_claim(backend, CAP_2).jobs
    assert _limited_claim(backend, CAP_2).jobs == []

    db.execute(
        "UPDATE {{prefix}}_jobs SET claim_expires_at = now() - interval '1 second' WHERE id = %s",
        (after_finish.claim.job_id,),
    )
    assert backend.recover_stale(max_failures={}, default_max_failures=20, limit=10) == 1
    assert len(_limited_claim(backend, CAP_2).jobs) == 1
    assert after_release.claim.job_id != after_finish.claim.job_id


def test_a_rate_limit_hands_out_starts_one_interval_apart(backend: Backend) -> None:
    backend.enqueue([new_job() for _ in range(5)])

    first = _limited_claim(backend, TEN_PER_SECOND)
    second = _limited_claim(backend, TEN_PER_SECOND)

    assert len(first.jobs) == 1
    assert second.jobs == []
    wait = second.throttled[KIND]
    assert timedelta(0) < wait <= timedelta(milliseconds=100)
    time.sleep(wait.total_seconds() + 0.01)
    assert len(_limited_claim(backend, TEN_PER_SECOND).jobs) == 1


def test_a_rate_limit_allows_a_burst_of_a_tenth_of_its_starts(backend: Backend) -> None:
    backend.enqueue([new_job() for _ in range(50)])
    limits = {KIND: KindLimits(rate_limit=RateLimit(100, timedelta(seconds=1)))}

    assert len(_limited_claim(backend, limits).jobs) == 10


def test_a_throttled_kind_does_not_hold_back_the_other_kinds_of_the_claim(
    backend: Backend,
) -> None:
    backend.enqueue([new_job() for _ in range(3)] + [new_job(FREE) for _ in range(3)])
    _limited_claim(backend, CAP_2)

    claimed = _limited_claim(backend, CAP_2, kinds=(FREE, KIND))

    assert [job.kind for job in claimed.jobs] == [FREE] * 3
    assert claimed.throttled == {KIND: CAP_RECHECK}


def test_concurrent_claimers_never_exceed_a_cap_together(
    backend: Backend, build_backend: Callable[[], Backend]
) -> None:
    backend.enqueue([new_job() for _ in range(40)])
    limits = {KIND: KindLimits(global_concurrency=3)}
    claimers = [build_backend() for _ in range(4)]
    got: list[int] = []
    start = threading.Barrier(len(claimers))

    def claim(other: Backend, n: int) -> None:
        start.wait()
        for _ in range(5):
            got.append(len(_limited_claim(other, limits, limit=2, worker_id=f"host:{n}").jobs))

    threads = [threading.Thread(target=claim, args=(b, n)) for n, b in enumerate(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(got) == 3


# -- promote_waiting -------------------------------------------------------------------


def test_aging_makes_jobs_waiting_age_after_high(backend: Backend, db: Any) -> None:
    old_low, old_normal, fresh_low, high = (
        new_job(priority=Priority.LOW),
        new_job(),
        new_job(priority=Priority.LOW),
        new_job(priority=Priority.HIGH),
    )
    backend.enqueue([old_low, old_normal, fresh_low, high])
    for job in (old_low, old_normal, high):
        db.execute(
            "UPDATE {{prefix}}_jobs SET visible_at = now() - interval '90 seconds' WHERE id = %s",
            (job.id,),
        )

    promoted = backend.promote_waiting([KIND], age_after=timedelta(minutes=1), limit=100)
    again = backend.promote_waiting([KIND], age_after=timedelta(minutes=1), limit=100)

    tiers = {
        row["id"]: row["priority"] for row in db.all("SELECT id, priority FROM {{prefix}}_jobs")
    }
    assert (promoted, again) == (2, 0)
    assert tiers == {
        old_low.id: Priority.HIGH,
        old_normal.id: Priority.HIGH,
        fresh_low.id: Priority.LOW,
        high.id: Priority.HIGH,
    }


# -- claim_fair (ADR 0129) -------------------------------------------------------------


def _fair_claim(backend: Backend, limit: int, *, worker_id: str = WORKER) -> list[ClaimedJob]:
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

    first = _fair_claim(backend, 4)

    assert _keys(db, first) == ["tenant-a", "tenant-b", "tenant-a", "tenant-a"]


def test_claims_of_one_job_alternate_between_the_keys(backend: Backend, db: Any) -> None:
    _burst_and_single(backend, 50)
    backend.enqueue([new_job(fair_key="tenant-b")])

    served = [_keys(db, _fair_claim(backend, 1)) for _ in range(6)]

    assert [key for [key] in served] == ["tenant-a", "tenant-b"] * 2 + ["tenant-a"] * 2


def test_the_rotation_goes_through_every_key_before_any_gets_a_second_turn(
    backend: Backend, db: Any
) -> None:
    for key in ("k3", "k1", "k2"):
        backend.enqueue([new_job(fair_key=key) for _ in range(3)])

    served = [_keys(db, _fair_claim(backend, 2)) for _ in range(3)]

    assert served == [["k1", "k2"], ["k3", "k1"], ["k2", "k3"]]


def test_one_key_alone_fills_the_claim_oldest_first(backend: Backend) -> None:
    jobs = [new_job(fair_key="solo") for _ in range(5)]
    backend.enqueue(jobs)

    claimed = _fair_claim(backend, 3)

    assert [j.claim.job_id for j in claimed] == [j.id for j in jobs[:3]]
    assert all(j.claim.run_count == 1 and j.claim.claimed_by == WORKER for j in claimed)


def test_tiers_stay_strict_across_keys(backend: Backend, db: Any) -> None:
    backend.enqueue([new_job(fair_key="bulk") for _ in range(5)])
    backend.enqueue([new_job(fair_key="low", priority=Priority.LOW)])
    backend.enqueue([new_job(fair_key="urgent", priority=Priority.HIGH) for _ in range(2)])

    claimed = _fair_claim(backend, 5)

    assert [j.priority for j in claimed] == [Priority.HIGH] * 2 + [Priority.NORMAL] * 3
    assert _keys(db, claimed) == ["urgent", "urgent", "bulk", "bulk", "bulk"]


def test_jobs_not_yet_visible_are_left_and_their_key_skipped(backend: Backend, db: Any) -> None:
    backend.enqueue([new_job(fair_key="later", delay=timedelta(hours=1)) for _ in range(3)])
    backend.enqueue(
        [new_job(fair_key="scheduled", eta=datetime.now(UTC) + timedelta(hours=1))]
        + [new_job(fair_key="now") for _ in range(2)]
    )

    claimed = _fair_claim(backend, 10)

    assert _keys(db, claimed) == ["now", "now"]


def test_jobs_without_a_key_are_left_to_the_plain_claim(backend: Backend) -> None:
    plain = new_job()
    backend.enqueue([plain, new_job(fair_key="k")])

    assert len(_fair_claim(backend, 10)) == 1
    [claimed] = backend.claim(kinds=[KIND], limit=10, worker_id=WORKER, lease=LEASE)
    assert claimed.claim.job_id == plain.id


def test_released_and_recovered_jobs_keep_their_key_and_are_claimed_again(
    backend: Backend, db: Any
) -> None:
    backend.enqueue([new_job(fair_key="a"), new_job(fair_key="b")])
    released, recovered = _fair_claim(backend, 2)
    assert backend.release([released.claim]) == 1
    db.execute(
        "UPDATE {{prefix}}_jobs SET claim_expires_at = now() - interval '1 second' WHERE id = %s",
        (recovered.claim.job_id,),
    )
    assert backend.recover_stale(max_failures={}, default_max_failures=20, limit=10) == 1

    again = _fair_claim(backend, 2)

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
        while jobs := _fair_claim(others[index], 4, worker_id=f"contract-host:{index}"):
            claimed[index].extend(j.claim.job_id for j in jobs)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(others))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    every = [job_id for ids in claimed for job_id in ids]
    assert len(every) == 120
    assert len(set(every)) == 120


# -- expiry (ADR 0135) -----------------------------------------------------------------


CLAIM_VERBS: dict[str, Callable[[Backend], list[ClaimedJob]]] = {
    "claim": lambda b: b.claim(kinds=[KIND], limit=10, worker_id=WORKER, lease=LEASE),
    "claim_limited": lambda b: _limited_claim(b, {KIND: KindLimits(global_concurrency=50)}).jobs,
    "claim_fair": lambda b: _fair_claim(b, 10),
}


@pytest.mark.parametrize("verb", sorted(CLAIM_VERBS))
def test_every_claim_says_which_jobs_are_past_their_expiry(backend: Backend, verb: str) -> None:
    key = "tenant-a" if verb == "claim_fair" else None
    past = new_job(fair_key=key, expires_in=timedelta(microseconds=1))
    future = new_job(fair_key=key, expires_in=timedelta(hours=1))
    never = new_job(fair_key=key)
    backend.enqueue([past, future, never])

    claimed = {job.claim.job_id: job.is_expired for job in CLAIM_VERBS[verb](backend)}

    assert claimed == {past.id: True, future.id: False, never.id: False}


def test_a_job_expiring_before_it_is_visible_is_claimed_expired_inside_a_horizon(
    backend: Backend,
) -> None:
    doomed = new_job(delay=timedelta(hours=1), expires_in=timedelta(minutes=30))
    in_time = new_job(delay=timedelta(hours=1), expires_in=timedelta(hours=2))
    backend.enqueue([doomed, in_time])

    claimed = backend.claim(
        kinds=[KIND], limit=10, worker_id=WORKER, lease=LEASE, horizon=timedelta(hours=2)
    )

    assert {job.claim.job_id: job.is_expired for job in claimed} == {
        doomed.id: True,
        in_time.id: False,
    }


def test_an_expired_job_spends_no_start_of_a_rate_limit(backend: Backend) -> None:
    hourly = {KIND: KindLimits(rate_limit=RateLimit(1, timedelta(hours=1)))}
    expired, live = new_job(expires_in=timedelta(microseconds=1)), new_job()
    backend.enqueue([expired])
    backend.enqueue([live])

    first = _limited_claim(backend, hourly, limit=1)
    second = _limited_claim(backend, hourly, limit=1)

    assert [(job.claim.job_id, job.is_expired) for job in first.jobs] == [(expired.id, True)]
    assert [(job.claim.job_id, job.is_expired) for job in second.jobs] == [(live.id, False)]
    assert KIND in _limited_claim(backend, hourly).throttled
