"""Retention: workers prune old terminal jobs, one at a time, never live ones."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from support import wait_until

import venturi
from venturi.naming import PRUNER_ROLE as ROLE
from venturi.runtime.pruner import Pruner


def insert(db: Any, job_id: str, status: str, finished_days_ago: float | None) -> None:
    finished_ago = None if finished_days_ago is None else timedelta(days=finished_days_ago)
    db.execute(
        "INSERT INTO {{prefix}}_jobs"
        " (id, kind, payload, status, created_at, visible_at, finished_at)"
        " VALUES (%s, 'k', '{}', %s, now() - interval '30 days', now() - interval '30 days',"
        " now() - %s::interval)",
        (job_id, status, finished_ago),
    )
    db.execute(
        "INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome)"
        " VALUES (%s, 'k', 1, now(), 'released')",
        (job_id,),
    )


def seed(db: Any) -> None:
    insert(db, "old-completed", "completed", 10)
    insert(db, "old-dead", "dead", 8)
    insert(db, "new-completed", "completed", 1)
    insert(db, "old-pending", "pending", None)
    insert(db, "old-claimed", "claimed", None)


def remaining(db: Any) -> list[str]:
    return [r["id"] for r in db.all("SELECT id FROM {{prefix}}_jobs ORDER BY id")]


def test_a_round_deletes_only_terminal_jobs_past_retention_with_their_journals(
    app: venturi.App, db: Any
) -> None:
    seed(db)

    deleted = Pruner(app.backend, retention=timedelta(days=7), batch_size=1).run_once()

    assert deleted == 2
    assert remaining(db) == ["new-completed", "old-claimed", "old-pending"]
    journal_ids = {r["job_id"] for r in db.journal()}
    assert journal_ids == {"new-completed", "old-claimed", "old-pending"}


def test_a_round_is_skipped_while_another_worker_prunes(app: venturi.App, db: Any) -> None:
    seed(db)
    holder = app.backend.try_lead(ROLE)
    assert holder is not None
    try:
        assert Pruner(app.backend, retention=timedelta(days=7)).run_once() is None
        assert len(remaining(db)) == 5
    finally:
        holder.release()
    assert Pruner(app.backend, retention=timedelta(days=7)).run_once() == 2


def test_a_worker_with_retention_prunes_while_it_runs(app: venturi.App, db: Any) -> None:
    @app.task(kind="k")
    def noop() -> None: ...

    seed(db)
    worker = venturi.Worker(app, concurrency=1, retention=timedelta(days=7))
    worker.start()
    try:
        wait_until(lambda: len(remaining(db)) == 3)
    finally:
        worker.stop(grace=1)
    assert remaining(db) == ["new-completed", "old-claimed", "old-pending"]
