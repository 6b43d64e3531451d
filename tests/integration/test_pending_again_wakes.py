"""Rows made pending again outside any worker's claim loop wake idle workers at once.

A stopping worker's released jobs and an operator's retries send the enqueue's
wake-up (ADR 20; ADR 0132, round four): an idle worker elsewhere takes them at
once instead of at its next poll. Each worker here polls every 30 s, so a job
that waited for the poll would fail the test's 10 s bound (a hang guard, not a
timing assert).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from support import wait_until

import venturi
from venturi.errors import Fail
from venturi.worker import Worker

LONG_POLL = 30.0


def test_a_job_a_stopping_worker_releases_starts_at_once_on_an_idle_worker(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    started, gate = threading.Event(), threading.Event()
    runs: list[int] = []

    @app.task(kind="again.released")
    def held(ctx: venturi.Context) -> None:
        runs.append(ctx.run_count)
        if ctx.run_count == 1:
            started.set()
            gate.wait(10)  # outlives the first worker's grace: released at its stop

    ref = held.delay()
    stopping = start_worker(poll_interval=LONG_POLL)
    assert started.wait(5)
    start_worker(poll_interval=LONG_POLL)
    wait_until(lambda: db.scalar("SELECT count(*) FROM {{prefix}}_workers") == 2)
    try:
        stopping.stop(grace=0.2)
        wait_until(lambda: db.outcomes(ref.id) == ["released", "completed"])
    finally:
        gate.set()
    assert runs == [1, 2]  # the second by the idle worker: the first one had stopped


def test_an_operators_retry_starts_at_once_on_an_idle_worker(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="again.retried")
    def flaky(ctx: venturi.Context) -> None:
        if ctx.run_count == 1:
            raise Fail("first run")

    ref = flaky.delay()
    start_worker(poll_interval=LONG_POLL)
    wait_until(lambda: db.outcomes(ref.id) == ["dead"])
    app.retry(ref.id)
    wait_until(lambda: db.outcomes(ref.id) == ["dead", "retried", "completed"])


def test_a_bulk_retry_starts_at_once_on_an_idle_worker(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="again.bulk")
    def flaky(ctx: venturi.Context, n: int) -> None:
        if ctx.run_count == 1:
            raise Fail("first run")

    refs = [flaky.delay(n) for n in range(3)]
    start_worker(poll_interval=LONG_POLL)
    wait_until(lambda: all(db.outcomes(ref.id) == ["dead"] for ref in refs))
    assert app.retry_matching(kind="again.bulk") == 3
    wait_until(lambda: all(db.outcomes(ref.id) == ["dead", "retried", "completed"] for ref in refs))
