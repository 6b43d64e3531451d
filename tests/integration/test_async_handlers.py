"""``async def`` handlers through a real threaded Worker (ADR 0126), read back with SQL.

Handlers that must outlive a limit or a grace await an ``asyncio.Event`` that is never
set, so the worker's own cancellation is what ends them; timed asserts are hang guards
with generous bounds, never tight ones.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from support import entries, row, status_is, wait_until

import venturi
from venturi.context import Context
from venturi.errors import ConfigurationError, Fail, Retry
from venturi.worker import Worker

#: Renewals (and so cancellation requests) every 0.2 s.
SHORT_LEASE = timedelta(seconds=0.6)


class Peak:
    """How many handlers ran at once, at most (touched on the loop thread only)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    async def hold(self, seconds: float) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1


@dataclass
class Progress:
    step: int


def test_every_outcome_of_an_async_handler_is_recorded_as_for_a_sync_one(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="aio.done")
    async def done(ctx: Context, n: int) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"n": n, "run": ctx.run_count}

    @app.task(kind="aio.boom", backoff=timedelta(hours=1))
    async def boom() -> None:
        await asyncio.sleep(0)
        raise ValueError("no luck")

    @app.task(kind="aio.retry")
    async def retry_later() -> None:
        raise Retry(delay=timedelta(hours=2))

    @app.task(kind="aio.fail")
    async def fail() -> None:
        raise Fail("bad input")

    @app.task(kind="aio.last", max_failures=1)
    async def last() -> None:
        raise RuntimeError("again")

    @app.task(kind="aio.pause")
    async def pause(ctx: Context) -> None:
        ctx.pause(timedelta(hours=1))

    refs = {
        "done": done.delay(2),
        "boom": boom.delay(),
        "retry": retry_later.delay(),
        "fail": fail.delay(),
        "last": last.delay(),
        "pause": pause.delay(),
    }
    start_worker(concurrency=1)
    for ref in refs.values():
        wait_until(lambda ref=ref: db.journal(ref.id))

    assert entries(db, refs["done"].id) == [("completed", 1, '{"n":2,"run":1}')]
    assert row(db, refs["done"].id)["status"] == "completed"
    [(outcome, _, note)] = entries(db, refs["boom"].id)
    assert (outcome, note) == ("retried", "ValueError: no luck")
    [boomed] = db.journal(refs["boom"].id)
    assert "raise ValueError" in boomed["traceback"]
    assert row(db, refs["boom"].id)["failure_count"] == 1
    assert entries(db, refs["retry"].id)[0][0] == "retried"
    [later] = db.one(
        "SELECT visible_at > now() + interval '119 minutes' AS later FROM {{prefix}}_jobs "
        "WHERE id = %s",
        (refs["retry"].id,),
    ).values()
    assert later
    assert entries(db, refs["fail"].id) == [("dead", 1, "bad input")]
    [(outcome, _, note)] = entries(db, refs["last"].id)
    assert outcome == "dead"
    assert note == "backstop reached after 1 failures (max_failures=1): RuntimeError: again"
    assert entries(db, refs["pause"].id) == [("paused", 1, None)]
    paused = row(db, refs["pause"].id)
    assert (paused["status"], paused["failure_count"]) == ("pending", 0)


def test_carry_and_attachments_of_an_async_handler_are_kept(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="aio.carry", carry=Progress)
    async def stepper(ctx: Context) -> int:
        progress = ctx.carry or Progress(step=0)
        ctx.carry = Progress(step=progress.step + 1)
        ctx.set_attachment({"step": ctx.carry.step})
        if ctx.carry.step < 3:
            ctx.pause()
        return int(ctx.carry.step)

    ref = stepper.delay()
    start_worker()
    wait_until(status_is(db, ref.id, "completed"))

    journal = db.journal(ref.id)
    assert [(e["outcome"], e["attachment"]) for e in journal] == [
        ("paused", {"step": 1}),
        ("paused", {"step": 2}),
        ("completed", {"step": 3}),
    ]
    assert row(db, ref.id)["carry"] == {"step": 3}


def test_twenty_async_handlers_wait_together_on_the_loop(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    peak = Peak()

    @app.task(kind="aio.wait")
    async def wait() -> None:
        await peak.hold(0.5)

    refs = wait.delay_many([()] * 20)
    started = time.monotonic()
    start_worker(concurrency=1)
    wait_until(
        lambda: (
            db.one("SELECT count(*) AS n FROM {{prefix}}_jobs WHERE status = 'completed'")["n"]
            == 20
        )
    )

    # 20 x 0.5 s one after another would be 10 s; together, about 0.5 s.
    assert time.monotonic() - started < 5
    assert peak.most == 20
    assert len(refs) == 20


def test_a_per_kind_cap_on_an_async_kind_and_async_concurrency_bound_the_loop(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    capped, total = Peak(), Peak()

    @app.task(kind="aio.capped", concurrency=2)
    async def narrow() -> None:
        await asyncio.gather(capped.hold(0.2), total.hold(0.2))

    @app.task(kind="aio.free")
    async def wide() -> None:
        await total.hold(0.2)

    narrow.delay_many([()] * 6)
    wide.delay_many([()] * 12)
    start_worker(concurrency=1, async_concurrency=5)
    wait_until(
        lambda: (
            db.one("SELECT count(*) AS n FROM {{prefix}}_jobs WHERE status = 'completed'")["n"]
            == 18
        )
    )

    assert capped.most == 2
    # The loop ran several at once, never more than async_concurrency (the one
    # handler thread did not bound it).
    assert 2 <= total.most <= 5


def test_one_worker_serves_sync_and_async_kinds_each_on_its_own_pool(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    async_ran = threading.Event()
    threads: dict[str, str] = {}

    @app.task(kind="aio.sync")
    def blocking() -> None:
        threads["sync"] = threading.current_thread().name
        # The only handler thread waits for an async run: it never held a thread slot.
        assert async_ran.wait(10)

    @app.task(kind="aio.async")
    async def awaiting() -> None:
        threads["async"] = threading.current_thread().name
        async_ran.set()

    sync_ref = blocking.delay()
    async_ref = awaiting.delay()
    start_worker(concurrency=1)
    wait_until(status_is(db, sync_ref.id, "completed"))
    wait_until(status_is(db, async_ref.id, "completed"))

    assert "-handler-" in threads["sync"]
    assert threads["async"].endswith("-loop")


def test_graceful_stop_cancels_async_runs_at_the_end_of_the_grace_and_releases_them(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    running = threading.Event()
    cancelled = threading.Event()

    @app.task(kind="aio.long")
    async def long_one() -> None:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    ref = long_one.delay()
    worker = start_worker()
    assert running.wait(10)
    started = time.monotonic()
    worker.stop(grace=0.3)

    assert time.monotonic() - started < 5
    assert cancelled.is_set()
    job = row(db, ref.id)
    assert (job["status"], job["failure_count"], job["claimed_by"]) == ("pending", 0, None)
    assert entries(db, ref.id) == [("released", 1, "worker shutdown")]


def test_an_async_run_past_its_time_limit_is_cancelled_and_retried(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    cancelled = threading.Event()

    @app.task(kind="aio.slow", time_limit=0.3, backoff=timedelta(hours=1))
    async def slow() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    @app.task(kind="aio.slow.last", time_limit=0.2, max_failures=1)
    async def slow_last() -> None:
        await asyncio.sleep(30)

    ref = slow.delay()
    last = slow_last.delay()
    start_worker()
    wait_until(lambda: entries(db, ref.id))
    wait_until(status_is(db, last.id, "dead"))

    assert entries(db, ref.id) == [("retried", 1, "time limit exceeded")]
    assert cancelled.wait(5)
    job = row(db, ref.id)
    assert (job["status"], job["failure_count"]) == ("pending", 1)
    assert entries(db, last.id) == [
        ("dead", 1, "backstop reached after 1 failures (max_failures=1): time limit exceeded")
    ]


def test_cancelling_a_running_async_job_cancels_its_coroutine(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    running = threading.Event()
    cancelled = threading.Event()

    @app.task(kind="aio.cancel", lease=SHORT_LEASE)
    async def forever() -> None:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    ref = forever.delay()
    start_worker()
    assert running.wait(10)
    app.cancel(ref.id)

    wait_until(status_is(db, ref.id, "dead"))
    assert entries(db, ref.id) == [("dead", 1, "cancelled")]
    assert row(db, ref.id)["failure_count"] == 0
    assert cancelled.wait(5)


def test_a_handler_cancelling_itself_without_a_request_is_an_ordinary_failure(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="aio.self_cancel", backoff=timedelta(hours=1))
    async def self_cancel() -> None:
        raise asyncio.CancelledError

    ref = self_cancel.delay()
    start_worker()
    wait_until(lambda: entries(db, ref.id))

    [(outcome, _, note)] = entries(db, ref.id)
    assert (outcome, note) == ("retried", "CancelledError")


def test_a_handler_blocking_the_loop_is_logged_with_its_kind_and_how_long(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="venturi.runtime.aio")

    @app.task(kind="aio.blocker")
    async def blocker() -> None:
        time.sleep(0.5)  # a sync call inside async def: the mistake being caught

    ref = blocker.delay()
    start_worker()
    wait_until(status_is(db, ref.id, "completed"))
    wait_until(lambda: any("blocked" in r.getMessage() for r in caplog.records))

    [record] = [r for r in caplog.records if "blocked" in r.getMessage()]
    message = record.getMessage()
    assert f"job {ref.id} (kind aio.blocker)" in message
    blocked = float(message.split("blocked for ")[1].split(" s")[0])
    assert 0.3 <= blocked < 5


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_async_concurrency_is_validated(app: venturi.App, value: Any) -> None:
    with pytest.raises(ConfigurationError, match="async_concurrency"):
        Worker(app, async_concurrency=value)
