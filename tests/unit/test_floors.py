"""Claim floors: used only right after full claims, and only briefly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from venturi.runtime.floors import ClaimFloors
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
