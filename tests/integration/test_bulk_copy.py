"""Large batches go through COPY: the rows are the same as the one-statement insert's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import venturi
from venturi.postgres.backend import COPY_THRESHOLD
from venturi.types import Priority


@pytest.fixture
def bulk(app: venturi.App) -> venturi.Task[Any, Any]:
    @app.task(kind="bulk.item")
    def item(n: int) -> None: ...

    return item


def test_a_large_batch_keeps_order_delays_etas_and_tiers(
    app: venturi.App, db: Any, bulk: venturi.Task[Any, Any]
) -> None:
    eta = datetime(2030, 1, 1, tzinfo=UTC)
    jobs = [
        bulk.new_job(
            kwargs={"n": n},
            countdown=60 if n % 3 == 1 else None,
            eta=eta if n % 3 == 2 else None,
            priority=Priority.HIGH if n % 2 else Priority.LOW,
        )
        for n in range(COPY_THRESHOLD + 44)
    ]

    refs = app.backend.enqueue(jobs)

    assert [r.id for r in refs] == [j.id for j in jobs]
    rows = {r["id"]: r for r in db.jobs()}
    assert len(rows) == len(jobs)
    created = [rows[j.id]["created_at"] for j in jobs]
    assert created == sorted(created) and len(set(created)) == len(created)
    for n, job in enumerate(jobs):
        row = rows[job.id]
        assert row["payload"] == {"n": n}
        assert row["status"] == "pending"
        assert row["priority"] == (0 if n % 2 else 2)
        if n % 3 == 1:
            assert row["visible_at"] - row["created_at"] == timedelta(seconds=60)
        elif n % 3 == 2:
            assert row["visible_at"] == eta
        else:
            assert row["visible_at"] == row["created_at"]


def test_a_large_batch_in_a_rolled_back_transaction_leaves_nothing(
    database_url: str, db: Any, bulk: venturi.Task[Any, Any]
) -> None:
    with psycopg.connect(database_url) as conn:
        bulk.delay_many([{"n": n} for n in range(COPY_THRESHOLD)], connection=conn)
        assert conn.execute(db._sql("SELECT count(*) FROM {{prefix}}_jobs")).fetchone() == (
            COPY_THRESHOLD,
        )
        conn.rollback()

    assert db.jobs() == []


def test_a_large_batch_wakes_listeners_once_committed(
    app: venturi.App, bulk: venturi.Task[Any, Any]
) -> None:
    listener = app.backend.listen()
    try:
        listener.wait(0)
        bulk.delay_many([{"n": n} for n in range(COPY_THRESHOLD)])
        assert listener.wait(5.0)
    finally:
        listener.close()
