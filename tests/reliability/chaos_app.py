"""The App that the reliability suite's worker subprocesses run.

Started as ``python -m venturi worker --app chaos_app:app`` with this folder
on ``PYTHONPATH``. Its database is ``$VENTURI_DATABASE_URL`` and its prefix
``$CHAOS_PREFIX``, both set by the test; the test imports ``build_app`` to
enqueue on the same prefix.

Every task has a short lease, so the jobs of a killed worker are recovered
within seconds, and a backstop far above anything the chaos can reach, so a
job interrupted several times is still run to completion (a job that went
``dead`` at the backstop would be a false alarm, not a lost job).
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
#: How long a ``chaos.work`` run takes: it makes a drain last long enough to be
#: interrupted, and bounds its duration from below on any machine.
WORK_SECONDS = 0.01
#: ``chaos.crash`` jobs whose ``n`` is a multiple of this end their process on their first run.
CRASH_EVERY = 200
PREFIX_ENV = "CHAOS_PREFIX"


def build_app(database_url: str | None, prefix: str) -> tuple[venturi.App, Any, Any]:
    """The App and its two tasks, ``chaos.work(n)`` and ``chaos.crash(n)``."""
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)

    @app.task(kind="chaos.work", lease=LEASE, max_failures=MAX_FAILURES)
    def work(n: int) -> int:
        threading.Event().wait(WORK_SECONDS)
        return n

    @app.task(kind="chaos.crash", lease=LEASE, max_failures=MAX_FAILURES)
    def crash(ctx: Context, n: int) -> int:
        threading.Event().wait(WORK_SECONDS / 2)
        if ctx.run_count == 1 and n % CRASH_EVERY == 0:
            # The whole process dies mid-run, with every other job it holds.
            os._exit(1)
        threading.Event().wait(WORK_SECONDS / 2)
        return n

    return app, work, crash


app, _work, _crash = build_app(None, os.environ.get(PREFIX_ENV, "chaos_unset"))
