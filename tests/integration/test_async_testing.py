"""``async def`` handlers under ``venturi.testing`` and ``Worker.run_once`` (ADR 0126):
run inline on a fresh event loop, refused clearly inside a running one."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

import venturi
from venturi.context import Context
from venturi.errors import ConfigurationError, Fail
from venturi.testing import aperform, drain, eager, perform
from venturi.types import OutcomeKind
from venturi.worker import Worker


def test_drain_runs_async_handlers_through_retries_to_their_end(app: venturi.App) -> None:
    @app.task(kind="at.flaky", backoff=0)
    async def flaky(ctx: Context, n: int) -> int:
        await asyncio.sleep(0)
        if ctx.run_count < 3:
            raise OSError("try again")
        return n * 2

    @app.task(kind="at.sync")
    def plain() -> str:
        return "sync"

    ref = flaky.delay(21)
    plain.delay()
    runs = drain(app)

    assert [(r.outcome.kind, r.outcome.note) for r in runs if r.job_id == ref.id] == [
        (OutcomeKind.RETRIED, "OSError: try again"),
        (OutcomeKind.RETRIED, "OSError: try again"),
        (OutcomeKind.COMPLETED, "42"),
    ]
    assert any(r.kind == "at.sync" and r.outcome.note == "sync" for r in runs)


def test_run_once_runs_an_async_handler(app: venturi.App, db: Any) -> None:
    @app.task(kind="at.once")
    async def once() -> str:
        await asyncio.sleep(0)
        return "ran"

    ref = once.delay()
    assert Worker(app).run_once() == 1
    assert db.one("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (ref.id,))["status"] == (
        "completed"
    )


def test_perform_and_aperform_map_an_async_handlers_endings(app: venturi.App) -> None:
    @app.task(kind="at.perform")
    async def handler(ctx: Context, how: str) -> str:
        await asyncio.sleep(0)
        if how == "fail":
            raise Fail("no")
        if how == "pause":
            ctx.pause(5)
        return how

    assert perform(handler, "ok").note == "ok"
    assert perform(handler, "fail").kind is OutcomeKind.DEAD
    assert perform(handler, "pause").kind is OutcomeKind.PAUSED
    assert asyncio.run(aperform(handler, "ok")).note == "ok"


def test_perform_cuts_an_async_handler_at_its_time_limit(app: venturi.App) -> None:
    @app.task(kind="at.limit", time_limit=0.2)
    async def slow() -> None:
        await asyncio.sleep(30)

    started = time.monotonic()
    outcome = perform(slow)

    assert time.monotonic() - started < 5
    assert (outcome.kind, outcome.note) == (OutcomeKind.RETRIED, "time limit exceeded")


def test_inline_runs_refuse_clearly_inside_a_running_loop(app: venturi.App) -> None:
    @app.task(kind="at.refused")
    async def refused() -> None:
        await asyncio.sleep(0)

    refused.delay()

    async def inside() -> None:
        with pytest.raises(ConfigurationError, match="aperform"):
            perform(refused)
        with pytest.raises(ConfigurationError, match="drain"):
            drain(app)

    asyncio.run(inside())
    # Nothing was claimed by the refused drain: the job is still there to run.
    assert [r.outcome.kind for r in drain(app)] == [OutcomeKind.COMPLETED]


def test_eager_runs_async_handlers_inline(app: venturi.App) -> None:
    @app.task(kind="at.eager", backoff=timedelta(hours=1))
    async def eager_one(ctx: Context) -> int:
        await asyncio.sleep(0)
        if ctx.run_count == 1:
            raise OSError("once")
        return ctx.run_count

    with eager(app) as session:
        ref = eager_one.delay()

    outcome = session.outcome_of(ref)
    assert (outcome.kind, outcome.note) == (OutcomeKind.COMPLETED, "2")
