"""Claim floors against real rows: a floor hides exactly the rows before it in claim order."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import venturi
from venturi.types import ClaimFloor

LEASE = timedelta(minutes=1)


def test_a_claim_with_a_floor_takes_only_rows_at_or_after_it_in_claim_order(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="floor.kind")
    def work(n: int) -> None: ...

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

    jobs = app.backend.claim(
        kinds=["floor.kind"], limit=10, worker_id="h:1", lease=LEASE, floors={"floor.kind": floor}
    )

    # job-4 (high tier) and job-1 (older) sort before the floor: left for a floorless claim.
    assert [job.claim.job_id for job in jobs] == ["job-2", "job-3", "job-5"]
    rest = app.backend.claim(kinds=["floor.kind"], limit=10, worker_id="h:1", lease=LEASE)
    assert [job.claim.job_id for job in rest] == ["job-4", "job-1"]
