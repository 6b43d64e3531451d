"""A worker's event loop ends as ``asyncio.run`` ends one: nothing left pending or noisy.

An async handler that awaits ``adelay`` opens the App's async pool on the worker's
loop; that pool's own tasks (psycopg_pool's scheduler and workers) must be closed
before the loop is, or the stop logs ``Task was destroyed but it is pending!`` and
``Event loop is closed`` tracebacks (SPEC 6.6).
"""

from __future__ import annotations

import gc
import logging
import sys
from typing import Any

import pytest
from support import wait_until

import venturi
from venturi.context import Context
from venturi.worker import Worker


def test_a_worker_whose_async_handlers_awaited_adelay_stops_without_asyncio_noise(
    app: venturi.App, db: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    @app.task(kind="stop.child")
    def child() -> None:
        return None

    @app.task(kind="stop.parent")
    async def parent(ctx: Context, n: int) -> None:
        await child.adelay()

    ids = [parent.delay(n).id for n in range(5)]
    worker = Worker(app, concurrency=2, poll_interval=1.0, kinds=["stop.parent"])
    with caplog.at_level(logging.INFO):
        worker.start()
        try:
            wait_until(
                lambda: db.one(
                    "SELECT count(*) AS n FROM {{prefix}}_jobs WHERE id = ANY(%s)"
                    " AND status = 'completed'",
                    (ids,),
                )["n"]
                == len(ids)
            )
        finally:
            worker.stop(grace=5)
        app.close()  # drops the pools of ended loops: what they left pending is collected
        gc.collect()

    assert db.one("SELECT count(*) AS n FROM {{prefix}}_jobs WHERE kind = 'stop.child'")["n"] == 5
    assert [r for r in caplog.records if r.name == "venturi.worker" and "stopped" in r.getMessage()]
    noise = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert noise == []
    assert [repr(u.exc_value) for u in unraisable] == []
