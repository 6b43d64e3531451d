"""Backend.claim_limited and promote_waiting: global caps and rate limits shared by every
claimer of a prefix, and priority aging (ADR 0128; the contracts in venturi/backend.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from backends import KIND, LEASE, WORKER, new_job

from venturi.backend import CAP_RECHECK, Backend
from venturi.types import (
    Finished,
    KindLimits,
    LimitedClaim,
    Outcome,
    OutcomeKind,
    Priority,
    RateLimit,
)

FREE = "contract.free"
CAP_2 = {KIND: KindLimits(global_concurrency=2)}
TEN_PER_SECOND = {KIND: KindLimits(rate_limit=RateLimit(10, timedelta(seconds=1)))}


def _claim(
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

    first = _claim(backend, CAP_2)
    second = _claim(backend, CAP_2, worker_id="contract-host:2")

    assert len(first.jobs) == 2
    assert first.throttled == {}
    assert second.jobs == []
    assert second.throttled == {KIND: CAP_RECHECK}


def test_every_way_a_claim_ends_gives_its_slot_back(backend: Backend, db: Any) -> None:
    """Finish, release and stale recovery: the cap counts claimed rows, so none leaks."""
    backend.enqueue([new_job() for _ in range(6)])
    done, released = _claim(backend, CAP_2).jobs

    backend.finish([Finished(done.claim, Outcome(OutcomeKind.COMPLETED))])
    [after_finish] = _claim(backend, CAP_2).jobs
    backend.release([released.claim])
    [after_release] = _claim(backend, CAP_2).jobs
    assert _claim(backend, CAP_2).jobs == []

    db.execute(
        "UPDATE {{prefix}}_jobs SET claim_expires_at = now() - interval '1 second' WHERE id = %s",
        (after_finish.claim.job_id,),
    )
    assert backend.recover_stale(max_failures={}, default_max_failures=20, limit=10) == 1
    assert len(_claim(backend, CAP_2).jobs) == 1
    assert after_release.claim.job_id != after_finish.claim.job_id


def test_a_rate_limit_hands_out_starts_one_interval_apart(backend: Backend) -> None:
    backend.enqueue([new_job() for _ in range(5)])

    first = _claim(backend, TEN_PER_SECOND)
    second = _claim(backend, TEN_PER_SECOND)

    assert len(first.jobs) == 1
    assert second.jobs == []
    wait = second.throttled[KIND]
    assert timedelta(0) < wait <= timedelta(milliseconds=100)
    time.sleep(wait.total_seconds() + 0.01)
    assert len(_claim(backend, TEN_PER_SECOND).jobs) == 1


def test_a_rate_limit_allows_a_burst_of_a_tenth_of_its_starts(backend: Backend) -> None:
    backend.enqueue([new_job() for _ in range(50)])
    limits = {KIND: KindLimits(rate_limit=RateLimit(100, timedelta(seconds=1)))}

    assert len(_claim(backend, limits).jobs) == 10


def test_a_throttled_kind_does_not_hold_back_the_other_kinds_of_the_claim(
    backend: Backend,
) -> None:
    backend.enqueue([new_job() for _ in range(3)] + [new_job(FREE) for _ in range(3)])
    _claim(backend, CAP_2)

    claimed = _claim(backend, CAP_2, kinds=(FREE, KIND))

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
            got.append(len(_claim(other, limits, limit=2, worker_id=f"host:{n}").jobs))

    threads = [threading.Thread(target=claim, args=(b, n)) for n, b in enumerate(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(got) == 3


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
