"""Claim floors against real claims (ADR 0115, ADR 0132): a row that becomes
eligible behind a kept floor (here a released job, which keeps its place) waits
at most for the floors' trust period, and after a cheap walk a short claim
drops the floors so the row is claimed at once."""

from __future__ import annotations

from backends import KIND, LEASE, WORKER, new_job

from venturi.backend import Backend
from venturi.runtime.floors import ClaimFloors
from venturi.types import ClaimedJob


def _claim_jobs(
    backend: Backend, floors: ClaimFloors, *, at: float, took: float
) -> list[ClaimedJob]:
    """One claim of the claim loop's shape: ``current`` at ``at``, ``record`` ``took`` later."""
    used = floors.current(at)
    jobs: list[ClaimedJob] = backend.claim(
        kinds=[KIND], limit=10, worker_id=WORKER, lease=LEASE, floors=used
    )
    floors.record(jobs, used=used, limit=10, now=at + took)
    return jobs


def _claim(backend: Backend, floors: ClaimFloors, *, at: float, took: float) -> list[str]:
    return [job.claim.job_id for job in _claim_jobs(backend, floors, at=at, took=took)]


def test_after_an_expensive_walk_a_released_job_behind_the_floor_is_claimed_after_the_trust_period(
    backend: Backend,
) -> None:
    first, second = new_job(), new_job()
    backend.enqueue([first, second])
    floors = ClaimFloors(refresh=0.1)
    # A 10 ms walk: short claims keep floors, trusted 20 x 10 ms = 0.2 s.
    claimed = _claim_jobs(backend, floors, at=0.0, took=0.01)
    assert [job.claim.job_id for job in claimed] == [first.id, second.id]

    [released] = [job for job in claimed if job.claim.job_id == first.id]
    assert backend.release([released.claim]) == 1
    later = new_job()
    backend.enqueue([later])

    # Within the trust period the claim starts at `second`: `later` is claimed,
    # the released `first` (older, so before the floor) waits ...
    assert _claim(backend, floors, at=0.1, took=0.001) == [later.id]
    assert _claim(backend, floors, at=0.15, took=0.001) == []
    # ... and the first claim after the period walks again and takes it.
    assert _claim(backend, floors, at=0.25, took=0.001) == [first.id]


def test_after_a_cheap_walk_a_short_claim_drops_the_floors_and_order_is_exact(
    backend: Backend,
) -> None:
    first, second = new_job(), new_job()
    backend.enqueue([first, second])
    floors = ClaimFloors(refresh=0.1)
    claimed = _claim_jobs(backend, floors, at=0.0, took=0.0005)

    [released] = [job for job in claimed if job.claim.job_id == first.id]
    assert backend.release([released.claim]) == 1

    assert _claim(backend, floors, at=0.01, took=0.0005) == [first.id]
