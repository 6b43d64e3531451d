"""The in-thread ways to run jobs: ``venturi.testing.drain``/``perform`` and
``Worker.run_once`` (STYLE R9), against real PostgreSQL.

They share the worker's claim, executor and finish path, so these tests also
check that the rows and journal they leave are the ones a worker leaves.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from ulid import ULID

import venturi
from venturi.errors import ArgumentsMismatch, ConfigurationError, Fail
from venturi.testing import DrainLimitReached, drain, perform
from venturi.types import OutcomeKind, Priority
from venturi.worker import Worker


def statuses(db: Any) -> dict[str, str]:
    return {r["id"]: r["status"] for r in db.jobs()}


def test_drain_runs_every_due_job_in_claim_order_and_records_each_outcome(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="dr.echo")
    def echo(word: str) -> str:
        return word.upper()

    low = echo.apply_async(("low",), priority=Priority.LOW)
    normal = echo.delay("normal")
    high = echo.apply_async(("high",), priority=Priority.HIGH)

    runs = drain(app)

    assert [(r.job_id, r.kind, r.outcome.kind, r.outcome.note) for r in runs] == [
        (high.id, "dr.echo", OutcomeKind.COMPLETED, "HIGH"),
        (normal.id, "dr.echo", OutcomeKind.COMPLETED, "NORMAL"),
        (low.id, "dr.echo", OutcomeKind.COMPLETED, "LOW"),
    ]
    assert all(r.is_recorded and r.run_count == 1 for r in runs)
    assert set(statuses(db).values()) == {"completed"}
    assert [e["outcome"] for e in db.journal()] == ["completed"] * 3
    assert drain(app) == []


def test_drain_leaves_future_jobs_unless_asked_to_include_scheduled_ones(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="dr.later")
    def later() -> None: ...

    ref = later.apply_async(countdown=timedelta(hours=3))

    assert drain(app) == []
    assert statuses(db) == {ref.id: "pending"}
    [run] = drain(app, include_scheduled=True)
    assert (run.job_id, run.outcome.kind) == (ref.id, OutcomeKind.COMPLETED)
    assert statuses(db) == {ref.id: "completed"}


def test_drain_runs_a_job_paused_without_delay_again_until_it_completes(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="dr.steps")
    def steps(ctx: venturi.Context) -> int:
        ctx.carry = (ctx.carry or 0) + 1
        if ctx.carry < 3:
            ctx.pause()
        return int(ctx.carry)

    ref = steps.delay()

    runs = drain(app)

    assert [(r.run_count, r.outcome.kind) for r in runs] == [
        (1, OutcomeKind.PAUSED),
        (2, OutcomeKind.PAUSED),
        (3, OutcomeKind.COMPLETED),
    ]
    assert db.one("SELECT carry FROM {{prefix}}_jobs WHERE id = %s", (ref.id,))["carry"] == 3


def test_drain_with_scheduled_jobs_retries_a_failing_job_up_to_its_backstop(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="dr.flaky", max_failures=3)
    def flaky() -> None:
        raise TimeoutError("upstream timed out")

    ref = flaky.delay()

    assert [r.outcome.kind for r in drain(app)] == [OutcomeKind.RETRIED]
    runs = drain(app, include_scheduled=True)

    assert [r.outcome.kind for r in runs] == [OutcomeKind.RETRIED, OutcomeKind.DEAD]
    job = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (ref.id,))
    assert (job["status"], job["failure_count"], job["run_count"]) == ("dead", 3, 3)


def test_drain_serves_only_the_kinds_it_is_given(app: venturi.App, db: Any) -> None:
    @app.task(kind="dr.a")
    def a() -> None: ...

    @app.task(kind="dr.b")
    def b() -> None: ...

    ref_a, ref_b = a.delay(), b.delay()

    assert [r.job_id for r in drain(app, kinds=["dr.a"])] == [ref_a.id]
    assert statuses(db) == {ref_a.id: "completed", ref_b.id: "pending"}
    with pytest.raises(ConfigurationError, match=r"dr\.nope"):
        drain(app, kinds=["dr.nope"])


def test_drain_gives_up_on_a_job_that_pauses_forever_and_releases_it(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="dr.forever")
    def forever(ctx: venturi.Context) -> None:
        ctx.pause()

    ref = forever.delay()

    with pytest.raises(DrainLimitReached):
        drain(app, max_runs=4)
    job = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (ref.id,))
    assert (job["status"], job["failure_count"]) == ("pending", 0)
    assert [e["outcome"] for e in db.journal(ref.id)] == ["paused"] * 4 + ["released"]


def test_perform_runs_a_handler_without_a_database_and_maps_its_ending(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="dr.perform")
    def check(ctx: venturi.Context, value: int) -> str:
        ctx.set_attachment({"seen": value})
        if value < 0:
            raise Fail("negative")
        return f"ok {value}"

    completed = perform(check, 2)
    dead = perform(check, value=-1)

    assert (completed.kind, completed.note, completed.attachment) == (
        OutcomeKind.COMPLETED,
        "ok 2",
        '{"seen":2}',
    )
    assert (dead.kind, dead.note, dead.is_failure) == (OutcomeKind.DEAD, "negative", True)
    with pytest.raises(ArgumentsMismatch):
        perform(check, 1, 2)
    assert db.jobs() == []


def test_run_once_runs_one_batch_in_the_calling_thread(app: venturi.App, db: Any) -> None:
    @app.task(kind="dr.once")
    def once(n: int) -> int:
        return n * 2

    refs = [once.delay(n) for n in range(3)]
    worker = Worker(app, concurrency=2)

    assert worker.run_once() == 2
    assert worker.run_once() == 1
    assert worker.run_once() == 0
    assert all(statuses(db)[ref.id] == "completed" for ref in refs)


def test_run_once_recovers_an_expired_claim_before_claiming(app: venturi.App, db: Any) -> None:
    @app.task(kind="dr.stale")
    def stale() -> None: ...

    job_id = str(ULID())
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at,
                                     claimed_by, claim_expires_at, run_count)
        VALUES (%s, 'dr.stale', '{}', 'claimed', now(), now(), 'gone:1',
                now() - interval '1 minute', 1)
        """,
        (job_id,),
    )

    assert Worker(app).run_once() == 1
    assert [(e["outcome"], e["run_no"]) for e in db.journal(job_id)] == [
        ("stale-recovered", 1),
        ("completed", 2),
    ]
