"""The App of the durable chaos test (test_durable_faults.py): ``durable.order(n)``.

Started as ``python -m venturi worker --app durable_app:app`` with this folder on
``PYTHONPATH``, its database ``$VENTURI_DATABASE_URL``, its prefix
``$CHAOS_PREFIX``. Each step function appends one line to
``$DURABLE_CALLS_FILE`` (job id, step, run, pid) as it starts: an
``O_APPEND`` write of one line goes to the kernel whole, so a SIGKILL a moment
later keeps it. The file is the record of every call, outside the step table.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any

import venturi
from venturi.context import Context

LEASE = timedelta(seconds=2)
MAX_FAILURES = 1000
#: Steps per job, and how long each one's function works (a kill lands inside some).
STEPS = 5
STEP_SECONDS = 0.02
#: A durable sleep after this step: each job pauses once, and runs at least twice.
SLEEP_AFTER = 2
SLEEP = timedelta(milliseconds=200)
CALLS_ENV = "DURABLE_CALLS_FILE"


def build_app(database_url: str | None, prefix: str) -> tuple[venturi.App, Any]:
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)
    calls_file = os.environ.get(CALLS_ENV)

    def call(job_id: str, step: int, run: int) -> dict[str, int]:
        # The side effect first, then the work: a kill during the work leaves a call
        # whose step was never recorded, which its next run makes again.
        if calls_file is not None:
            line = f"{job_id} {step} {run} {os.getpid()}\n".encode()
            fd = os.open(calls_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        threading.Event().wait(STEP_SECONDS)
        return {"step": step, "run": run}

    @app.task(kind="durable.order", lease=LEASE, max_failures=MAX_FAILURES)
    def order(ctx: Context, n: int) -> list[Any]:
        results = []
        for step in range(STEPS):
            results.append(ctx.step(f"step-{step}", call, ctx.job_id, step, ctx.run_count))
            if step == SLEEP_AFTER:
                ctx.sleep(SLEEP)
        return results

    return app, order


app, _order = build_app(None, os.environ.get("CHAOS_PREFIX", "chaos_unset"))
