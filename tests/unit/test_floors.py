"""Claim floors: used right after full claims, after short ones only when walks are
expensive, and only briefly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from venturi.runtime.floors import MAX_TRUST, ClaimFloors
from venturi.types import Claim, ClaimedJob, ClaimFloor, Priority

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def job(kind: str, priority: Priority, seconds: int) -> ClaimedJob:
    return ClaimedJob(
        claim=Claim(f"{kind}-{seconds}", "h:1", 1),
        kind=kind,
        payload={},
        carry=None,
        priority=priority,
        failure_count=0,
        created_at=T0 + timedelta(seconds=seconds),
        claim_expires_at=T0 + timedelta(minutes=5),
    )


def test_no_floors_before_any_claim() -> None:
    assert ClaimFloors().current(now=0.0) == {}


def test_a_full_claim_sets_each_kinds_floor_at_its_last_job_in_claim_order() -> None:
    floors = ClaimFloors(refresh=1.0)
    jobs = [
        job("a", Priority.HIGH, 5),
        job("b", Priority.NORMAL, 1),
        job("a", Priority.NORMAL, 2),
        job("a", Priority.NORMAL, 3),
    ]
    floors.record(jobs, used={}, limit=4, now=10.0)
    assert floors.current(now=10.5) == {
        "a": ClaimFloor(int(Priority.NORMAL), T0 + timedelta(seconds=3)),
        "b": ClaimFloor(int(Priority.NORMAL), T0 + timedelta(seconds=1)),
    }


def test_a_short_claim_drops_every_floor() -> None:
    floors = ClaimFloors(refresh=1.0)
    floors.record([job("a", Priority.NORMAL, 1)], used={}, limit=1, now=0.0)
    used = floors.current(now=0.1)
    assert used
    floors.record([job("a", Priority.NORMAL, 2)], used=used, limit=8, now=0.2)
    assert floors.current(now=0.3) == {}


def test_floors_expire_refresh_seconds_after_the_last_claim_made_without_them() -> None:
    floors = ClaimFloors(refresh=1.0)
    floors.record([job("a", Priority.NORMAL, 1)], used={}, limit=1, now=0.0)
    used = floors.current(now=0.6)
    # A full claim made with floors moves them on but does not extend their life.
    floors.record([job("a", Priority.NORMAL, 2)], used=used, limit=1, now=0.7)
    assert floors.current(now=0.9) == {"a": ClaimFloor(1, T0 + timedelta(seconds=2))}
    assert floors.current(now=1.0) == {}
    # The next claim goes without floors; a full one starts a new period.
    floors.record([job("a", Priority.NORMAL, 3)], used={}, limit=1, now=1.1)
    assert floors.current(now=1.5) == {"a": ClaimFloor(1, T0 + timedelta(seconds=3))}


def test_kinds_absent_from_a_full_claim_with_floors_keep_theirs() -> None:
    floors = ClaimFloors(refresh=1.0)
    both = [job("a", Priority.NORMAL, 1), job("b", Priority.LOW, 1)]
    floors.record(both, used={}, limit=2, now=0.0)
    used = floors.current(now=0.1)
    floors.record([job("a", Priority.NORMAL, 4)], used=used, limit=1, now=0.2)
    assert floors.current(now=0.3) == {
        "a": ClaimFloor(1, T0 + timedelta(seconds=4)),
        "b": ClaimFloor(2, T0 + timedelta(seconds=1)),
    }


def walk(floors: ClaimFloors, jobs: list[ClaimedJob], *, at: float, took: float) -> None:
    """A claim without floors as the claim loop makes it: ``current`` before, ``record`` after."""
    used = floors.current(now=at)
    assert used == {}
    floors.record(jobs, used=used, limit=8, now=at + took)


def test_after_an_expensive_walk_short_claims_keep_floors_trusted_20_times_the_walk() -> None:
    floors = ClaimFloors(refresh=0.1)
    walk(floors, [job("a", Priority.NORMAL, 1)], at=0.0, took=0.015)  # short, but 15 ms
    used = floors.current(now=0.1)
    assert used == {"a": ClaimFloor(1, T0 + timedelta(seconds=1))}
    floors.record([job("a", Priority.NORMAL, 2)], used=used, limit=8, now=0.11)
    floors.record([], used=floors.current(now=0.2), limit=8, now=0.21)
    assert floors.current(now=0.31) == {"a": ClaimFloor(1, T0 + timedelta(seconds=2))}
    # Trusted 20 x 15 ms = 0.3 s after the walk ended at 0.015.
    assert floors.current(now=0.32) == {}


def test_floors_are_never_trusted_longer_than_max_trust() -> None:
    floors = ClaimFloors(refresh=0.1)
    walk(floors, [job("a", Priority.NORMAL, 1)], at=0.0, took=0.5)
    assert floors.current(now=0.5 + MAX_TRUST - 0.01)
    assert floors.current(now=0.5 + MAX_TRUST) == {}


def test_a_cheap_walk_after_an_expensive_one_brings_back_exact_order() -> None:
    floors = ClaimFloors(refresh=0.1)
    walk(floors, [job("a", Priority.NORMAL, 1)], at=0.0, took=0.015)
    walk(floors, [job("a", Priority.NORMAL, 2)], at=1.0, took=0.0005)  # short and cheap
    assert floors.current(now=1.01) == {}


def test_a_walk_that_finds_nothing_is_timed_too() -> None:
    floors = ClaimFloors(refresh=0.1)
    walk(floors, [], at=0.0, took=0.015)
    # No floors yet, so the next claim is a walk as well, and timed: 15 ms keeps its floor.
    walk(floors, [job("a", Priority.NORMAL, 1)], at=0.02, took=0.015)
    assert floors.current(now=0.05) == {"a": ClaimFloor(1, T0 + timedelta(seconds=1))}
