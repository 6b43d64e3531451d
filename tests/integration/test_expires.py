"""``apply_async(expires=...)`` and ``@task(expires=...)`` on a real database (SPEC 6.6,
ADR 0135): a job not started by its expiry ends ``dead``, note ``expired``, and its
handler never runs; one that starts in time runs as any other; a bad expiry is refused
with nothing written; a task default counts from when each job is due; the expiry is
read back by ``app.job(id)`` and shown by ``venturi jobs show``."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import entries, row, status_is, wait_until

import venturi
from venturi.cli import main
from venturi.errors import InvalidDelay, JobFailed, Retry
from venturi.testing import drain
from venturi.types import OutcomeKind
from venturi.worker import Worker

ETA = datetime(2031, 6, 1, 9, 30, tzinfo=UTC)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_job_visible_only_after_its_expiry_ends_dead_expired_on_a_worker_unrun(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    ran: list[int] = []

    @app.task(kind="expires.work")
    def work(n: int) -> int:
        ran.append(n)
        return n

    late = work.apply_async((1,), countdown=1.0, expires=0.3)
    in_time = work.apply_async((2,), expires=60)
    start_worker()

    wait_until(status_is(db, in_time.id, "completed"))
    wait_until(status_is(db, late.id, "dead"))  # visible after a second: a bounded wait
    job = row(db, late.id)
    assert (job["run_count"], job["failure_count"]) == (1, 0)
    assert entries(db, late.id) == [("dead", 1, "expired")]
    with pytest.raises(JobFailed, match="expired"):
        late.result(timeout=5)
    assert ran == [2]
    assert in_time.result(timeout=5) == 2


@pytest.mark.anyio
async def test_aapply_async_takes_expires_as_apply_async_does(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    ran: list[int] = []

    @app.task(kind="expires.awaited")
    def work(n: int) -> None:
        ran.append(n)

    try:
        late = await work.aapply_async((1,), countdown=1.0, expires=0.3)
        in_time = await work.aapply_async((2,), expires=timedelta(minutes=1))
        with pytest.raises(InvalidDelay, match="expires"):
            await work.aapply_async((3,), expires=-1)
    finally:
        await app.aclose()
    start_worker()

    wait_until(status_is(db, in_time.id, "completed"))
    wait_until(status_is(db, late.id, "dead"))
    assert entries(db, late.id) == [("dead", 1, "expired")]
    assert ran == [2]
    assert len(db.jobs()) == 2


def test_an_async_handler_past_its_expiry_is_never_awaited(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    ran: list[int] = []

    @app.task(kind="expires.async")
    async def work(n: int) -> int:
        ran.append(n)
        return n

    past = work.apply_async((1,), expires=datetime.now(UTC) - timedelta(seconds=5))
    in_time = work.apply_async((2,), expires=timedelta(minutes=1))
    start_worker()

    wait_until(status_is(db, in_time.id, "completed"))
    wait_until(status_is(db, past.id, "dead"))
    assert entries(db, past.id) == [("dead", 1, "expired")]
    assert ran == [2]


def test_drain_ends_a_job_expired_before_it_is_due_dead_and_runs_the_others(
    app: venturi.App,
) -> None:
    """With the scheduled jobs: one whose expiry comes before its countdown ends never runs."""
    ran: list[int] = []

    @app.task(kind="expires.drained")
    def work(n: int) -> None:
        ran.append(n)

    late = work.apply_async((1,), countdown=3600, expires=60)
    in_time = work.apply_async((2,), countdown=60, expires=3600)
    plain = work.apply_async((3,))

    runs = {run.job_id: run for run in drain(app, include_scheduled=True)}

    assert (runs[late.id].outcome.kind, runs[late.id].outcome.note) == (OutcomeKind.DEAD, "expired")
    assert not runs[late.id].outcome.is_failure
    assert runs[in_time.id].outcome.kind is OutcomeKind.COMPLETED
    assert runs[plain.id].outcome.kind is OutcomeKind.COMPLETED
    assert sorted(ran) == [2, 3]


def test_a_retry_due_after_the_expiry_is_not_run(app: venturi.App) -> None:
    """Every claim checks the expiry, as Celery's retries keep theirs (ADR 0135)."""
    ran: list[int] = []

    @app.task(kind="expires.retried")
    def flaky(n: int) -> None:
        ran.append(n)
        raise Retry("later", delay=timedelta(hours=1))

    ref = flaky.apply_async((1,), expires=timedelta(minutes=30))

    runs = drain(app, include_scheduled=True)

    assert [(r.run_count, r.outcome.kind, r.outcome.note) for r in runs] == [
        (1, OutcomeKind.RETRIED, "Retry: later"),
        (2, OutcomeKind.DEAD, "expired"),
    ]
    assert ran == [1]
    assert all(r.job_id == ref.id for r in runs)


def test_a_task_default_applies_to_every_enqueue_and_counts_from_when_the_job_is_due(
    app: venturi.App, db: Any
) -> None:
    default = timedelta(minutes=5)

    @app.task(kind="expires.default", expires=default)
    def work(n: int) -> None: ...

    now, delayed, at = work.delay(1), work.apply_async((2,), countdown=60), work.apply_async(
        (3,), eta=ETA
    )
    own = work.apply_async((4,), countdown=600, expires=30)  # a call's own: from the call
    few = work.delay_many([(n,) for n in range(3)])
    many = work.delay_many([(n,) for n in range(300)])  # the COPY path

    rows = {r["id"]: r for r in db.jobs()}
    for ref in (now, delayed, *few, *many):
        assert rows[ref.id]["expires_at"] - rows[ref.id]["visible_at"] == default
    assert rows[at.id]["expires_at"] == ETA + default
    assert rows[own.id]["expires_at"] - rows[own.id]["created_at"] == timedelta(seconds=30)


def test_a_job_without_an_expiry_stores_none(app: venturi.App, db: Any) -> None:
    @app.task(kind="expires.none")
    def work() -> None: ...

    work.delay()
    work.delay_many([() for _ in range(3)])
    assert [r["expires_at"] for r in db.jobs()] == [None] * 4


BAD = [0, -1, timedelta(0), "soon", True, float("nan"), datetime(2031, 1, 1)]


@pytest.mark.parametrize("value", BAD, ids=[repr(v) for v in BAD])
def test_a_bad_expires_raises_invalid_delay_and_writes_nothing(
    app: venturi.App, db: Any, value: object
) -> None:
    @app.task(kind="expires.bad")
    def work(n: int) -> None: ...

    with pytest.raises(InvalidDelay, match="expires"):
        work.apply_async((1,), expires=value)  # type: ignore[arg-type]
    assert db.jobs() == []


def test_an_operator_retry_runs_an_expired_job(app: venturi.App) -> None:
    @app.task(kind="expires.retry")
    def work() -> str:
        return "ran"

    ref = work.apply_async(expires=datetime.now(UTC) - timedelta(seconds=5))
    [expired] = drain(app)
    assert expired.outcome.note == "expired"

    app.retry(ref.id)
    [run] = drain(app)

    assert (run.job_id, run.outcome.kind) == (ref.id, OutcomeKind.COMPLETED)
    assert app.job(ref.id).job.expires_at is None


def test_the_expiry_is_read_back_and_shown_by_jobs_show(
    app: venturi.App, database_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    @app.task(kind="expires.shown")
    def work() -> None: ...

    ref = work.apply_async(expires=ETA)
    plain = work.delay()
    assert app.job(ref.id).job.expires_at == ETA
    assert app.job(plain.id).job.expires_at is None

    options = ["--database-url", database_url, "--prefix", prefix]
    assert main(["jobs", "show", ref.id, *options]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert main(["jobs", "show", ref.id, "--json", *options]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["jobs", "show", plain.id, *options]) == 0
    shown_plain = capsys.readouterr().out.splitlines()

    [line] = [line for line in shown if line.startswith("expires_at")]
    assert "2031-06-01" in line
    assert shown[shown.index(line) - 1].startswith("visible_at")
    assert as_json["job"]["expires_at"].startswith("2031-06-01T09:30:00")
    assert not any(line.startswith("expires_at") for line in shown_plain)
