"""Fair claims through a real worker (ADR 0129): a tenant's burst does not starve another
tenant's single job. Claim order is read from the claim events and the journal, never
from timings."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from support import wait_until

import venturi
from venturi.events import Event, JobClaimed
from venturi.testing import drain
from venturi.types import NewJob, Status
from venturi.worker import Worker

BURST = 5_000


class ClaimOrder:
    """The job ids of every JobClaimed event, in the order the claims were made."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        assert isinstance(event, JobClaimed)
        with self._lock:
            self.ids.append(event.job_id)


def _burst_then_single(app: venturi.App, kind: str, **options: Any) -> tuple[Any, str]:
    @app.task(kind=kind, **options)
    def sync(tenant: str, n: int) -> int:
        return n

    sync.delay_many([("tenant-a", n) for n in range(BURST)])
    return sync, sync.delay("tenant-b", 0).id


def test_a_single_job_of_one_tenant_starts_in_the_first_claim_beside_a_burst_of_another(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    _, single = _burst_then_single(app, "fair.sync", fair_key=lambda tenant, **_: tenant)
    order = ClaimOrder()
    app.events.subscribe(order, types=[JobClaimed])

    worker = start_worker(concurrency=4)
    wait_until(lambda: app.job(single).job.status is Status.COMPLETED, timeout=30)
    worker.stop(grace=5)

    # The first claim takes one job of each tenant in turn: B's is the second claimed.
    assert order.ids.index(single) == 1, order.ids[:8]
    completed = [
        row["job_id"]
        for row in db.all(
            "SELECT job_id FROM {{prefix}}_journal WHERE outcome = 'completed' ORDER BY id"
        )
    ]
    assert completed.index(single) < 8, len(completed)
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE fair_key = 'tenant-a'") == BURST


def test_without_a_fair_key_the_same_single_job_waits_behind_the_burst(
    app: venturi.App, start_worker: Callable[..., Worker]
) -> None:
    """The control: the plain claim is oldest first, so the single job comes last."""
    _, single = _burst_then_single(app, "plain.sync")
    order = ClaimOrder()
    app.events.subscribe(order, types=[JobClaimed])

    worker = start_worker(concurrency=4)
    wait_until(lambda: app.job(single).job.status is Status.COMPLETED, timeout=60)
    worker.stop(grace=5)

    assert order.ids.index(single) == BURST


def test_jobs_of_a_fair_kind_enqueued_without_a_key_still_run(app: venturi.App) -> None:
    """Jobs written before the task declared fair_key: the plain claim tops the fair one up."""

    @app.task(kind="fair.late", fair_key=lambda tenant, **_: tenant)
    def late(tenant: str) -> str:
        return tenant

    unkeyed = NewJob("01JFAIRUNKEYED000000000000", "fair.late", '{"tenant": "old"}')
    app.backend.enqueue([unkeyed])
    keyed = late.delay("new")

    runs = drain(app, ["fair.late"])

    assert sorted(r.job_id for r in runs) == sorted([unkeyed.id, keyed.id])
    assert {r.job_id: r.outcome.kind.value for r in runs} == {
        unkeyed.id: "completed",
        keyed.id: "completed",
    }


def test_a_worker_serving_a_fair_and_a_plain_kind_runs_both(app: venturi.App) -> None:
    """The fair kind's claims and the other kinds' take turns (ClaimPlan.turns)."""

    @app.task(kind="fair.mixed", fair_key=lambda tenant, **_: tenant)
    def fair(tenant: str) -> None: ...

    @app.task(kind="plain.mixed")
    def plain(n: int) -> None: ...

    fair.delay_many([("a",)] * 20)
    plain.delay_many([(n,) for n in range(20)])

    runs = drain(app, ["fair.mixed", "plain.mixed"])

    kinds = [r.kind for r in runs]
    assert sorted(kinds) == ["fair.mixed"] * 20 + ["plain.mixed"] * 20
    assert kinds[:4] == ["fair.mixed", "plain.mixed", "fair.mixed", "plain.mixed"]
